"""Is this CUDA image what its labels say, without a GPU? Standard library plus torch.

Checks, in the image (`apptainer test`, also under qemu for another architecture):
the machine is the label's architecture; torch imports; torch.version.cuda and the NCCL
version torch was built with equal the labels (which scripts/build-image.sh takes from
requirements/cuda.txt); the NCCL and CUDA runtime shared libraries of the PyPI wheels load
with ctypes (no driver needed: libcuda.so.1 is opened only when CUDA is first used).

    CUDA_OK arch=aarch64 torch=2.13.0 cuda=13.0 nccl=2.29.7 libnccl=... libcudart=...

Exit 1 with one line per mismatch.
"""

import ctypes
import glob
import json
import os
import platform
import sys

# Where Apptainer keeps the labels; CUDA_CHECK_LABELS for tests outside an image.
LABELS = os.environ.get("CUDA_CHECK_LABELS", "/.singularity.d/labels.json")
PREFIX = "org.torchrun-jsc."
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def find_lib(pattern: str) -> str:
    """The first match of pattern in any sys.path entry's nvidia/ tree ('' if none)."""
    for entry in sys.path:
        hits = sorted(glob.glob(os.path.join(entry, "nvidia", "**", pattern), recursive=True))
        if hits:
            return hits[0]
    return ""


def main() -> int:
    with open(LABELS) as f:
        labels = {k[len(PREFIX):]: v for k, v in json.load(f).items() if k.startswith(PREFIX)}
    errors = []
    want_machine = MACHINES.get(labels.get("arch", ""), labels.get("arch", "?"))
    if platform.machine() != want_machine:
        errors.append(f"machine is {platform.machine()}, label arch says {labels.get('arch')}")
    import torch  # noqa: PLC0415 (after the label check: a wrong-arch image fails there first)

    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()[:3]))
    except (AttributeError, RuntimeError):  # a CPU build has no NCCL
        nccl = "none"
    found = {"torch-version": torch.__version__.split("+")[0], "cuda-version": torch.version.cuda,
             "nccl-version": nccl}
    for key, value in found.items():
        if labels.get(key) != value:
            errors.append(f"{key}: torch reports {value}, label says {labels.get(key)}")
    libs = {}
    for name, pattern in (("libnccl", "libnccl.so.2"), ("libcudart", "libcudart.so.*")):
        path = find_lib(pattern)
        try:
            ctypes.CDLL(path or pattern)
            libs[name] = path or pattern
        except OSError as e:
            errors.append(f"{name} does not load ({e})")
    for line in errors:
        print(f"CUDA_MISMATCH: {line}", flush=True)
    if errors:
        return 1
    print(f"CUDA_OK arch={platform.machine()} torch={found['torch-version']} "
          f"cuda={found['cuda-version']} nccl={nccl} "
          + " ".join(f"{k}={os.path.basename(v)}" for k, v in libs.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
