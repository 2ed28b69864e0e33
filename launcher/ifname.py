"""The socket-interface step of the pyxis task script, with nothing but the image's python3.

Where it sits: spec -> runtimes + **modes (pyxis task script)** -> jobscript text. pyxis
starts the whole task inside the image, where `ip` and `getent` are often missing (NGC and
pytorch/pytorch images); python3 is there in every image that runs PyTorch, and its
standard library is enough. It applies the rule of modes.common.SOCKET_IFNAME (and torchrun_jsc's
launcher/torchrun_jsc/addresses.py): every address of MASTER_ADDR, loopback skipped unless
alone, IPv4 first unless TORCHRUN_JSC_ADDRESS_FAMILY says otherwise; then the interface that
holds the source address a UDP connect (no packet sent) picks towards it.
"""

PY_IFNAME = r"""import fcntl, ipaddress, os, socket, struct, sys
host, fam = sys.argv[1], os.environ.get("TORCHRUN_JSC_ADDRESS_FAMILY", "auto").lower()
if fam not in ("auto", "ipv4", "ipv6", "any"):
    sys.exit(f"TORCHRUN_JSC_ADDRESS_FAMILY: expected auto, ipv4, ipv6 or any, got {fam}")
try:
    addrs = list(dict.fromkeys(i[4][0] for i in socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)))
except OSError:
    addrs = []
def loop(a):
    ip = ipaddress.ip_address(a)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)
rest = [a for a in addrs if not loop(a)]
v4, v6 = [a for a in rest if ":" not in a], [a for a in rest if ":" in a]
pick = {"auto": v4 or v6, "ipv4": v4, "ipv6": v6, "any": rest}[fam] if rest else [a for a in addrs if loop(a)]
if not pick:
    sys.exit(f"no interface reaches MASTER_ADDR={host}")
addr = pick[0]
family = socket.AF_INET6 if ":" in addr else socket.AF_INET
with socket.socket(family, socket.SOCK_DGRAM) as s:
    s.connect((addr, 9))
    src = ipaddress.ip_address(s.getsockname()[0])
def v4_of(name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return ipaddress.ip_address(raw[20:24])
def v6_of(name):
    try:
        lines = open("/proc/net/if_inet6").read().split("\n")
    except OSError:
        return []
    return [ipaddress.ip_address(bytes.fromhex(f[0])) for f in map(str.split, lines) if f and f[-1] == name]
for _, name in socket.if_nameindex():
    if (src.version == 4 and v4_of(name) == src) or (src.version == 6 and src in v6_of(name)):
        print(name)
        sys.exit(0)
sys.exit(f"no interface reaches MASTER_ADDR={host}")
"""

# The bash part: the same contract as modes.common.SOCKET_IFNAME (a user's value wins, NCCL's exact form).
SOCKET_IFNAME_PY = f"""\
if [ -z "${{GLOO_SOCKET_IFNAME:-}}" ]; then
    dev=$(python3 -I - "$MASTER_ADDR" <<'PY'
{PY_IFNAME}PY
) || exit 1
    export GLOO_SOCKET_IFNAME="$dev"
fi
export NCCL_SOCKET_IFNAME="${{NCCL_SOCKET_IFNAME:-=$GLOO_SOCKET_IFNAME}}"
"""
