"""``python3 -m launcher.ray_node``: the name the ray jobs start; the agent is launcher/node/ray.py.

Kept as the entry point (not a leftover): a job rendered by one kit version may run in an
image that holds another, and this name is what both agree on.
"""
import sys

from launcher.node.ray import main

if __name__ == "__main__":
    sys.exit(main())
