"""Can NCCL use InfiniBand/RoCE from inside this image? Standard library only.

NCCL's IB transport dlopen()s the verbs library (rdma-core's libibverbs.so.1), which loads a
provider per device kind (mlx5 for ConnectX). An image without them makes NCCL log
"NET/IB : No device found" and run over TCP sockets, several times slower, with no error.
This loads the library, lists the providers it can load and asks it for devices:

    VERBS_OK lib=libibverbs.so.1 providers=N (mlx5 ...) devices=M [names]

Exit 1 with one line when the library or the mlx5 provider is missing. Zero devices is fine
here (a node without an HCA, or the lab); the doctor compares with the host's devices.
"""

import ctypes
import glob
import os
import sys

LIB = "libibverbs.so.1"


def providers() -> list:
    """Provider names rdma-core can load (lib<name>-rdmav<N>.so in its provider directory)."""
    names = set()
    dirs = ("/usr/lib/*/libibverbs", "/usr/lib64/libibverbs", "/usr/lib/libibverbs",
            "/usr/local/lib/libibverbs", "/opt/conda/lib/libibverbs")
    for path in (p for d in dirs for p in glob.glob(d + "/lib*-rdmav*.so")):
        names.add(os.path.basename(path)[3:].split("-rdmav")[0])
    return sorted(names)


def devices(lib: ctypes.CDLL) -> list:
    lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    lib.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ibv_get_device_name.restype = ctypes.c_char_p
    lib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
    lib.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    n = ctypes.c_int(0)
    lst = lib.ibv_get_device_list(ctypes.byref(n))
    if not lst:
        return []
    try:
        return [lib.ibv_get_device_name(lst[i]).decode() for i in range(n.value)]
    finally:
        lib.ibv_free_device_list(lst)


def main() -> int:
    try:
        lib = ctypes.CDLL(LIB)
    except OSError as e:
        print(f"VERBS_MISSING: {LIB} does not load ({e}): NCCL would use TCP sockets; "
              "install rdma-core's libibverbs1 ibverbs-providers librdmacm1", flush=True)
        return 1
    prov = providers()
    if "mlx5" not in prov:
        print(f"VERBS_MISSING: no mlx5 provider among {prov or 'none'}: install ibverbs-providers",
              flush=True)
        return 1
    devs = devices(lib)
    print(f"VERBS_OK lib={LIB} providers={len(prov)} ({' '.join(prov)}) devices={len(devs)}"
          + (f" {' '.join(devs)}" if devs else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
