"""The address and interface rule, stdlib only: which address of a rendezvous host counts and
which local interface reaches it. Runs on compute nodes: imported by torchrun_jsc and the Ray
agent, run from the kit by every task script (``python3 -I "$kit/node/run.py" net-env``) and
the doctor (docs/development/node-code.md). Modules here import nothing of the composer and
nothing outside the standard library.
"""
