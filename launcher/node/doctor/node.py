"""The doctor's node side: every check on one node, the network ones with the first node.

Where it sits: spec -> launcher.features.preflight (config, jobscript lines) -> **node** (one task
per node: ``python3 -I "$kit/node/run.py" doctor node CONFIG HOST PORT -- WRAP...``, each node
prints one report
line) -> launcher.node.doctor.report (the reports -> the table or JSON, exit status). The first
node listens on the rendezvous port and answers each other node with its clock; the others
resolve the name, connect and measure. Node-side code (the rule of launcher/node/net, the
node-local checks of launcher/node/doctor/local.py): standard library only, the node's
python3. Every check has its own deadline and the node side ends with ``os._exit``, so a
hung filesystem or a dropped packet costs seconds, not the step.
"""

import json
import os
import socket
import threading
import time

from launcher.node.doctor.local import binds, cell, image, inside, rdma_host, space
from launcher.node.net.addresses import address_family, candidates
from launcher.node.net.fast import SYS_NET, fast_nics, kind, nics
from launcher.node.net.probe import interface_addresses, source_address

MARK = "torchrun-jsc-doctor-report "
COLUMNS = ("name", "same", "first", "tcp", "iface", "binds", "image", "inside", "gpus",
           "rdma", "space", "clock")  # docs/guide/doctor.md says what each checks


def in_thread(fn, timeout, late):
    """fn() in a daemon thread; ``late`` (a cell) when it has not returned within timeout."""
    box = []

    def work():
        try:
            box.append(fn())
        except Exception as exc:  # a check that crashes is a cross, not a traceback
            box.append(cell(False, type(exc).__name__, exc))
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    return box[0] if box else late


def resolve(host, env, timeout):
    """(chosen address or None, every address, cell): the rule torchrun_jsc applies, with
    TORCHRUN_JSC_ADDRESS_FAMILY from ``env`` (a bad value is the cell's cause)."""
    def work():
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
        return list(dict.fromkeys(i[4][0].split("%")[0] for i in infos))
    found = in_thread(work, timeout, None)
    if found is None:
        return None, [], cell(False, host, "no answer within %.0f s (check DNS or "
                              "/etc/hosts)" % timeout)
    if isinstance(found, dict):  # the thread's crash cell: getaddrinfo's error
        return None, [], cell(False, host, "does not resolve: " + _why(found["cause"]))
    try:
        chosen = candidates(host, found, address_family(env))[0]
    except ValueError as exc:
        return None, found, cell(False, host, exc)
    return chosen, found, cell(True, chosen, ", ".join(found))


def _why(text):
    return text.split("] ", 1)[-1]


def is_local(addr):
    """True when addr belongs to this machine: binding it works only then."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
            return True
        except OSError:
            return False


def listen(port):
    """Node 0: listen on the rendezvous port as the store would (all addresses)."""
    last = None
    for fam, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError as exc:  # no IPv6 on this node
            last = exc
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore
        try:
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((addr, port))
            s.listen(64)
            return s, cell(True, "listening", "port %d" % port)
        except OSError as exc:
            s.close()
            if exc.errno == 98:  # EADDRINUSE
                return None, cell(False, "port %d" % port, "already in use on this node "
                                  "(another program or job listens there)")
            last = exc
    return None, cell(False, "port %d" % port, "cannot listen: %s"
                      % getattr(last, "strerror", last))


def serve(sock, peers, deadline, me):
    """Answer each peer with this node's clock until all came or the deadline passed."""
    served = 0
    while served < peers and time.time() < deadline:
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            conn, _ = sock.accept()
        except OSError:
            break
        with conn:
            conn.settimeout(1.0)
            try:
                conn.sendall((json.dumps({"doctor": me, "t": time.time()}) + "\n").encode())
                conn.recv(16)  # the peer closes first, so TIME_WAIT stays on its side
            except OSError:
                pass
        served += 1
    sock.close()


def reach(addr, port, deadline, skew_max):
    """Other nodes: connect to the first node's port until answered or the deadline."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    where = "%s port %d" % (addr, port)
    error = None
    while True:
        left = deadline - time.time()
        if left <= 0:
            break
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(left)
        t0 = time.time()
        try:
            s.connect((addr, port))
        except socket.timeout:
            s.close()
            return cell(False, where, "no answer within the deadline: packets are dropped "
                        "(firewall, or no route back)"), None
        except OSError as exc:
            s.close()
            error = exc
            if exc.errno in (101, 113):  # ENETUNREACH, EHOSTUNREACH
                return cell(False, where, "%s: no route from this node" % exc.strerror), None
            time.sleep(0.1)  # refused: the first node may not listen yet
            continue
        return _answer(s, t0, where, skew_max)
    if error is not None:
        return cell(False, where, "%s until the deadline: nothing listens there (the first "
                    "node's check did not start, or a firewall rejects)" % error.strerror), None
    return cell(False, where, "no answer within the deadline: packets are dropped"), None


def _answer(s, t0, where, skew_max):
    with s:
        s.settimeout(1.0)
        data = b""
        try:
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    t1 = time.time()
    try:
        theirs = json.loads(data.decode())["t"]
    except (ValueError, KeyError, TypeError):
        return cell(True, where, "reached; another program answers there (not the doctor)"), \
            cell(None, "", "no clock from the first node")
    offset = (t0 + t1) / 2 - theirs
    clock = cell(abs(offset) <= skew_max, "%+.3f s" % offset,
                 "" if abs(offset) <= skew_max else "clock differs from the first node's by "
                 "more than %g s" % skew_max)
    return cell(True, "%.0f ms" % ((t1 - t0) * 1000), where), clock


def iface(addr, env, sys_net=SYS_NET):
    """The user's GLOO/NCCL_SOCKET_IFNAME exist here, and the interface torchrun_jsc and the
    task scripts would pick towards ``addr`` (the address the name check chose by the same
    rule; None: the name does not resolve), by launcher/node/net/probe.py, with its kind
    (InfiniBand, Slingshot: launcher/node/net/fast.py); a warning where that interface is not
    fast while a fast one exists on this node (the management network would carry it)."""
    names = {n for _, n in socket.if_nameindex()}
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = env.get(var, "")
        if not value or value.startswith("^"):
            continue
        exact = value.startswith("=") or var == "GLOO_SOCKET_IFNAME"
        for want in value.lstrip("=").split(","):
            if want and not (want in names if exact else any(n.startswith(want) for n in names)):
                return cell(False, "%s=%s" % (var, value), "no interface %r on this node (it "
                            "has %s)" % (want, ", ".join(sorted(names))))
    if addr is None:
        return cell(None, "", "the name does not resolve")
    src = source_address(addr, 0)
    local = interface_addresses()
    name = local.get(src) if src else None
    if not name:
        return cell(False, addr, "no interface reaches %s" % addr)
    chosen = env.get("GLOO_SOCKET_IFNAME") or name
    here = nics(local, sys_net)
    what = next((kind(n) for n in here if n.name == chosen), None)
    out = cell(True, chosen + (" (%s)" % what if what else ""))
    fast = [] if what or env.get("GLOO_SOCKET_IFNAME") else fast_nics(here)
    if fast:
        out["warn"] = ("%s reaches %s, while %s (%s, %s) is on this node: the rendezvous and "
                       "the sockets would use the slower network; name the fast one "
                       "(site.hostname_suffix, or site generic's rule)" % (
                           chosen, addr, fast[0].name, kind(fast[0]),
                           ", ".join(fast[0].addresses)))
    return out


def first_cell(first, addr, found, mine):
    """Does the chosen address belong to the first node (and only to it)? ``mine``: those of
    the name's addresses that are this node's."""
    if addr is None:
        return cell(None)
    if mine and len(mine) < len(found):  # torchrun_jsc refuses such a name
        return cell(False, ", ".join(found), "resolves to addresses on this node (%s) and not "
                    "on it (%s): use a name of one node only" % (
                        ", ".join(mine), ", ".join(a for a in found if a not in mine)))
    local = addr in mine
    if first:
        return cell(local, "yes" if local else addr, "" if local else "not an address of "
                    "this node, which is the first node (the name points elsewhere)")
    return cell(not local, "yes" if not local else addr, "" if not local else "an address of "
                "this node, not of the first node (this node resolves the name to itself)")


def run_node(conf, host, port, wrap, env=None):
    """Every check on this node: the report (a dict) that the table collects."""
    env = dict(os.environ if env is None else env)
    start = time.time()
    net_deadline = start + conf.get("timeout", 5.0)
    first = env.get("SLURM_NODEID", "0") == "0"
    peers = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1) - 1
    out = {c: cell(None) for c in COLUMNS if c != "same"}
    listener = None
    if first:  # listen before anything else: the others connect as soon as they resolved
        listener, out["tcp"] = listen(port)
    side = {}
    worker = threading.Thread(target=lambda: side.update(_side_checks(conf, wrap, env)),
                              daemon=True)
    worker.start()
    addr, found, out["name"] = resolve(host, env, min(3.0, conf.get("timeout", 5.0)))
    nic = {}
    finder = threading.Thread(target=lambda: nic.update(
        iface=iface(addr, env)), daemon=True)
    finder.start()
    mine = [a for a in found if is_local(a)]
    out["first"] = first_cell(first, addr, found, mine)
    if not first and addr is None:
        out["tcp"] = cell(None, "", "the name does not resolve")
    elif not first and addr in mine:  # connecting would only reach this node itself
        out["tcp"] = cell(None, "", "the name points to this node")
    elif not first:
        out["tcp"], clock = reach(addr, port, net_deadline, conf.get("max_skew", 2.0))
        out["clock"] = clock or cell(None, "", "no answer from the first node")
    if listener is not None:
        me = env.get("SLURMD_NODENAME") or socket.gethostname()
        serve(listener, peers, net_deadline, me)
    worker.join(max(0.0, start + conf.get("deadline", 12.0) - time.time()))
    late = cell(False, "", "check did not finish within %g s" % conf.get("deadline", 12.0))
    finder.join(max(0.0, start + conf.get("deadline", 12.0) - time.time()))
    for key in ("binds", "image", "inside", "gpus", "rdma", "space"):
        out[key] = side.get(key, late)
    out["iface"] = nic.get("iface", late)
    if first:
        out["clock"] = cell(True, "reference")
    return {"node": env.get("SLURMD_NODENAME") or socket.gethostname(),
            "nodeid": int(env.get("SLURM_NODEID", "0")), "address": addr,
            "endpoint": "%s:%d" % (host, port),
            "seconds": round(time.time() - start, 3), "checks": out}


def _side_checks(conf, wrap, env):
    """The checks that need no other node, run beside the network exchange."""
    t = conf.get("timeout", 5.0)
    out = {"binds": in_thread(lambda: binds(conf.get("binds", [])), t,
                              cell(False, "", "stat did not return within %g s (hung "
                                   "filesystem?)" % t))}
    img = in_thread(lambda: image(conf.get("image"), conf["runtime"]), t,
                    cell(False, conf.get("image"), "reading did not finish within %g s" % t))
    started, ins, gpus, rdma = inside(wrap, conf, conf.get("start_timeout", 10.0),
                                      rdma_host(env))
    if img["ok"] is False:
        started = img
    elif img["ok"] and started["ok"]:
        started = cell(True, "started, " + img["value"], img["cause"])
    out.update(image=started, inside=ins, gpus=gpus, rdma=rdma)
    try:
        out["space"] = space(conf, env)
    except OSError as exc:
        out["space"] = cell(False, exc.filename or "", exc.strerror or exc)
    return out
