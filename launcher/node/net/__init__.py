"""The address and interface rule, stdlib only: which address of a rendezvous host counts and
which local interface reaches it. Runs on compute nodes: imported by torchrun_jsc and the Ray
agent (installed in the image or venv) and shipped as ``python3 -c`` source to every task
script and the doctor (launcher/shipped.py; docs/development/shipped-code.md). Modules here
import nothing of the composer and nothing outside the standard library.
"""
