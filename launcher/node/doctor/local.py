"""The doctor's checks that need no other node: binds, the image, inside the container, GPUs,
Enroot's free space.

Where it sits: launcher.node.doctor.node runs these beside the network exchange on each node.
Node-side code with node.py (docs/development/node-code.md): standard library only, no
imports from the kit, results as ``cell`` dicts (ok True/False/None, the value, the cause).
"""

import json
import os
import subprocess

INSIDE_PY = r"""import glob, json, os, shutil, sys
out = {"which": {c: shutil.which(c) for c in sys.argv[1:] if c}, "python": sys.version.split()[0]}
try:
    from importlib import metadata
    out["torch"] = metadata.version("torch")
except Exception:
    out["torch"] = None
try:  # the kit's images record the torch they were built with (Apptainer's labels)
    labels = json.load(open("/.singularity.d/labels.json"))
except Exception:
    labels = {}
out["label_torch"] = labels.get("org.torchrun-jsc.torch-version")
try:  # the CUDA the image's torch was built for, without importing torch (seconds)
    import importlib.util, re
    spec = importlib.util.find_spec("torch")
    text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
    out["image_cuda"] = re.search(r"^cuda\b[^=\n]*=\s*'([^']+)'", text, re.M).group(1)
except Exception:
    out["image_cuda"] = labels.get("org.torchrun-jsc.cuda-version")
try:  # the host's kernel module ("Kernel Module  565.57.01"), through the shared /proc
    out["driver"] = open("/proc/driver/nvidia/version").read().split("Kernel Module")[1].split()[0]
except Exception:
    out["driver"] = None
out["cvd"] = os.environ.get("CUDA_VISIBLE_DEVICES")
out["devs"] = sorted(glob.glob("/dev/nvidia[0-9]*"))
try:  # what NCCL's IB transport needs: the device files and rdma-core's verbs library
    out["ib_dev"] = sorted(os.listdir(os.environ.get("TORCHRUN_JSC_DEV_IB", "/dev/infiniband")))
except OSError:
    out["ib_dev"] = None
try:
    import ctypes
    ctypes.CDLL("libibverbs.so.1")
    out["verbs"] = ""
except OSError as exc:
    out["verbs"] = str(exc)[:200] or "does not load"
try:  # CUDA usable, not only device files: the driver's library loads and sees the GPUs
    import ctypes
    cuda, count = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
    rc = cuda.cuInit(0)
    out["cuda"] = {"rc": rc or cuda.cuDeviceGetCount(ctypes.byref(count)), "count": count.value}
except (OSError, AttributeError) as exc:
    out["cuda"] = {"error": str(exc)[:200] or "libcuda.so.1 does not load"}
out["nvlibs_missing"] = []  # the host driver's other libraries that CUDA and NCCL open
for name in ("libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
    try:
        ctypes.CDLL(name)
    except OSError:
        out["nvlibs_missing"].append(name)
out["providers"] = sorted({os.path.basename(p)[3:].split("-rdmav")[0] for d in (
    "/usr/lib/*/libibverbs", "/usr/lib64/libibverbs", "/usr/lib/libibverbs",
    "/usr/local/lib/libibverbs", "/opt/conda/lib/libibverbs") for p in glob.glob(
    d + "/lib*-rdmav*.so")})
print("doctor-inside " + json.dumps(out))
"""
# The image's python3 runs INSIDE_PY; without python3 the shell says so (the image did start).
INSIDE_SH = ('command -v python3 >/dev/null 2>&1 || { echo "doctor-inside-nopython"; exit 0; }; '
             'exec python3 -c "$0" "$@"')


def cell(ok, value="", cause=""):
    """One check's result: ok True (pass), False (the cross), None (does not apply)."""
    return {"ok": ok, "value": str(value), "cause": str(cause)}


def binds(paths):
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        return cell(False, ", ".join(missing), "bind source missing on this node")
    return cell(True, "%d present" % len(paths) if paths else "none")


def image(path, kind):
    """Readable, and an image by its first bytes (SIF, squashfs or a sandbox directory)."""
    if not path or "://" in path or (kind == "pyxis" and not path.endswith((".sqsh", ".squashfs"))):
        return cell(None, path or "", "not a local file")
    if os.path.isdir(path):
        ok = os.path.isdir(os.path.join(path, "usr"))
        return cell(ok, path, "" if ok else "directory without /usr: not a sandbox image")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        return cell(False, path, "cannot read: %s" % (exc.strerror or exc))
    if head[32:41] == b"SIF_MAGIC" or head[:4] == b"hsqs":
        return cell(True, "%.0f MiB" % (os.path.getsize(path) / 2 ** 20), path)
    return cell(False, path, "not a SIF or squashfs image (first bytes %r)" % head[:8])


def inside(wrap, conf, timeout, hcas=()):
    """Start the image the way the launch does and look around in it: (image, inside, gpus,
    rdma); ``hcas``: the host's RDMA devices (rdma_host)."""
    if conf["runtime"] == "pyxis":
        na = cell(None, "", "pyxis: the image starts with the launch step")
        return na, na, na, (na if hcas else rdma_cell(hcas, None, conf))
    argv = list(wrap) + ["sh", "-c", INSIDE_SH, INSIDE_PY, conf.get("launcher") or "",
                         conf.get("program") or ""]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        bad = cell(False, argv[0], "did not start within %.0f s" % timeout)
        return bad, cell(None), cell(None), cell(None)
    except OSError as exc:
        return cell(False, argv[0], exc.strerror or exc), cell(None), cell(None), cell(None)
    lines = done.stdout.splitlines()
    started = cell(True, "started") if conf["runtime"] != "bare" else cell(None, "bare")
    if "doctor-inside-nopython" in lines:
        return started, cell(False, "python3", "not found in the image"), cell(None), \
            cell(None)
    facts = [json.loads(l[14:]) for l in lines if l.startswith("doctor-inside ")]
    if not facts:
        last = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        return cell(False, conf.get("image") or argv[0], last), cell(None), cell(None), \
            cell(None)
    return started, inside_cell(facts[0], conf), gpu_cell(facts[0], conf), \
        rdma_cell(hcas, facts[0], conf)


def inside_cell(f, conf):
    for name in (conf.get("launcher"), conf.get("program")):
        if name and not f["which"].get(name):
            return cell(False, name, "not found on the PATH inside")
    torch = f.get("torch")
    if conf.get("min_torch") and not torch:
        return cell(False, "torch", "not installed inside (python %s)" % f["python"])
    if conf.get("min_torch") and _version(torch) < _version(conf["min_torch"]):
        return cell(False, "torch " + torch, "torchrun_jsc needs >= " + conf["min_torch"])
    label = f.get("label_torch")
    if torch and label and torch != label:
        return cell(False, "torch " + torch, "the image was built with torch %s: another torch "
                    "shadows it (PYTHONPATH, a bound venv, ~/.local?)" % label)
    return cell(True, "torch %s" % torch if torch else "python %s" % f["python"])


def _version(text):
    out = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        out.append(int(digits[:4]))
    return tuple(out)


def gpu_cell(f, conf):
    want, cvd, devs = conf.get("gpus", 0), f.get("cvd"), f.get("devs", [])
    seen = [d for d in (cvd or "").split(",") if d]
    value = "%d requested, CUDA_VISIBLE_DEVICES=%s, %d device files" % (want, cvd or "", len(devs))
    if want == 0:
        return cell(True, "none requested (sees %d)" % len(seen))
    if len(seen) != want:
        return cell(False, value, "the container does not see the requested GPUs")
    if conf.get("fake_gpus"):
        return cell(True, "%d (fake GRES: device files not checked)" % want)
    if len(devs) < want:
        return cell(False, value, "no /dev/nvidia* device files inside the container "
                    "(Apptainer without --nv, Enroot without its nvidia hook, or no driver)")
    cuda = f.get("cuda") or {}
    if "error" in cuda:
        return cell(False, "libcuda.so.1", "CUDA is not usable inside the container: the "
                    "driver's library does not load (%s); Apptainer needs --nv, Enroot/pyxis "
                    "NVIDIA_DRIVER_CAPABILITIES with compute" % cuda["error"])
    if cuda.get("rc"):
        return cell(False, "cuInit: CUDA error %d" % cuda["rc"], "CUDA is not usable inside the "
                    "container (%s)" % CUDA_ERRORS.get(cuda["rc"], "see cuda.h's CUresult"))
    if cuda and cuda.get("count", 0) < want:
        return cell(False, "CUDA sees %d" % cuda["count"], "CUDA sees fewer GPUs than the %d "
                    "requested" % want)
    old = driver_too_old(f.get("driver"), f.get("image_cuda"))
    if old:
        return cell(False, "driver %s" % f["driver"], old)
    if f.get("nvlibs_missing"):
        return cell(False, ", ".join(f["nvlibs_missing"]), "the host driver's library is missing "
                    "in the container: Apptainer's --nv binds what nvliblist.conf lists and the "
                    "host's ldconfig cache finds (on aarch64 nodes often not all): bind the "
                    "host's copy (ldconfig -p | grep NAME) and put its directory on "
                    "LD_LIBRARY_PATH, as JUPITER users do with /opt/nvidia/lib")
    return cell(True, "%d" % want)


# The oldest Linux driver (kernel module major) each CUDA major release runs on (CUDA's
# release notes, minor version compatibility); newer CUDA on an older driver needs the
# forward-compatibility libraries.
MIN_DRIVER = {11: 450, 12: 525, 13: 580}


def driver_too_old(driver, image_cuda):
    """One line when the node's driver is older than the image's CUDA needs, else ''."""
    try:
        major, cuda_major = int(driver.split(".")[0]), int(image_cuda.split(".")[0])
    except (AttributeError, ValueError):
        return ""
    need = MIN_DRIVER.get(cuda_major)
    if need is None or major >= need:
        return ""
    older = max(c for c in MIN_DRIVER if MIN_DRIVER[c] <= major) if major >= 450 else None
    image = "an image with CUDA %d" % older if older else "an image with an older CUDA"
    return ("the image's CUDA %s needs driver >= %d, this node has %s: use CUDA's forward-"
            "compatibility libraries (cuda-compat, on LD_LIBRARY_PATH; datacenter GPUs only) "
            "or %s" % (image_cuda, need, driver, image))


# cuda.h's CUresult values a container's cuInit/cuDeviceGetCount typically returns
CUDA_ERRORS = {3: "not initialized",
               34: "libcuda.so.1 is CUDA's stub library, not the driver's: the image's stub "
                   "shadows the host driver (LD_LIBRARY_PATH, ldconfig)",
               35: "the driver is older than this CUDA: CUDA_ERROR_INSUFFICIENT_DRIVER",
               46: "the GPUs are busy or unavailable (exclusive-process compute mode?)",
               100: "no CUDA device visible: CUDA_VISIBLE_DEVICES hides them, or no device",
               101: "CUDA_VISIBLE_DEVICES names an invalid device",
               304: "the OS refused the call (device files without permission?)",
               803: "the container's CUDA user-mode driver does not match the kernel module",
               999: "unknown error (a driver/kernel module mismatch or a broken device)"}


def rdma_host(env):
    """The host's RDMA devices (InfiniBand/RoCE HCAs, e.g. mlx5_0), from sysfs."""
    root = env.get("TORCHRUN_JSC_SYSFS_IB", "/sys/class/infiniband")
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def rdma_cell(hcas, f, conf):
    """With RDMA devices on the host the container must see /dev/infiniband/uverbs* and load
    rdma-core's verbs library with a provider, or NCCL silently uses TCP sockets."""
    if not hcas:
        return cell(None, "no RDMA devices", "none in /sys/class/infiniband: NCCL uses sockets")
    if f is None:
        return cell(None, " ".join(hcas), "the container did not start")
    tcp = "NCCL on this node falls back to TCP sockets (several times slower, no error)"
    if not [d for d in f.get("ib_dev") or [] if d.startswith("uverbs")]:
        how = {"apptainer": "Apptainer binds the host's /dev unless --contain or the site's "
                            "`mount dev = minimal`: add --bind /dev/infiniband (runtime.binds)",
               "enroot": "Enroot binds /dev through its system mounts (10-system.fstab): a "
                         "site config without it needs /dev/infiniband mounted (an fstab in "
                         "Enroot's mounts.d, or a mount hook); pyxis: "
                         "--container-mounts=/dev/infiniband"}.get(
                             conf["runtime"], "the node lacks the device files (rdma-core's "
                             "udev rules, the ib_uverbs module)")
        return cell(False, "no /dev/infiniband/uverbs*", "the host has %s but the container "
                    "does not see its device files: %s; %s" % (" ".join(hcas), tcp, how))
    if f.get("verbs") is None or f.get("verbs"):
        return cell(False, "libibverbs.so.1", "the host has %s but the image cannot load the "
                    "verbs library (%s): %s; install rdma-core (libibverbs1 ibverbs-providers) "
                    "in the image" % (" ".join(hcas), f.get("verbs") or "not checked", tcp))
    want = "mlx5" if any(h.startswith("mlx5") for h in hcas) else None
    provs = f.get("providers") or []
    if not provs or (want and want not in provs):
        return cell(False, "providers: %s" % (" ".join(provs) or "none"), "the image's verbs "
                    "library has no %s provider for %s: %s; install ibverbs-providers in the "
                    "image" % (want or "", " ".join(hcas), tcp))
    return cell(True, "%s, verbs" % " ".join(hcas), "providers: " + " ".join(provs))


RAM_FS = ("tmpfs", "ramfs")


def fs_type(path, mounts):
    """The filesystem type of ``path`` from /proc/self/mounts text: the longest mount point
    that holds it (the last mounted of equal ones), '' when none does."""
    best, kind = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside_it = point == "/" or path == point or path.startswith(point.rstrip("/") + "/")
        if inside_it and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


# The Enroot runtime's shell functions (the set-up's own rule for the data path).
ENROOT_LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "enroot-lib.sh")


def data_path(conf, env):
    """Enroot's data path on this node, asked the way the set-up asks it (the kit's
    enroot_data_path, launcher/node/enroot-lib.sh: `enroot info`, else Enroot's rule)."""
    script = 'source "$1" && enroot_data_path'
    got = subprocess.run(["bash", "-c", script, "enroot-data", ENROOT_LIB], env=env,
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True,
                         timeout=conf.get("timeout", 5.0))
    return got.stdout.strip() if got.returncode == 0 else ""


def space(conf, env, mounts_file="/proc/self/mounts"):
    """Free space at Enroot's data path against 3x the squashfs; a cross on tmpfs (RAM)."""
    if conf["runtime"] != "enroot":
        return cell(None)
    try:
        path = data_path(conf, env)
    except subprocess.TimeoutExpired:
        return cell(False, "", "Enroot's data path: no answer within %g s" % conf.get("timeout", 5.0))
    if not path:
        return cell(False, "", "cannot tell Enroot's data path (enroot info, its enroot.conf)")
    probe = os.path.realpath(path)
    while not os.path.exists(probe) and probe not in ("/", ""):
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    need = 3 * os.path.getsize(conf["image"]) if os.path.isfile(conf["image"]) else 0
    value = "%.1f GiB free at %s" % (free / 2 ** 30, path)
    with open(mounts_file) as f:
        kind = fs_type(probe, f.read())
    if kind in RAM_FS:
        return cell(False, "%s (%s)" % (path, kind), "Enroot's data path is in RAM: every "
                    "unpacked image takes node memory, also after the job; set runtime.data_path "
                    "(or the site's ENROOT_DATA_PATH in enroot.conf) to node-local disk")
    if free < need:
        return cell(False, value, "need %.1f GiB (3x the squashfs) to unpack it" % (need / 2 ** 30))
    return cell(True, value)
