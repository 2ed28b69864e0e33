#!/usr/bin/env bash
# Local multi-node Slurm cluster with a JSC-like network, for `make demo` and the ring 3 tests.
#
#   bash scripts/cluster.sh up [N]    # munge + slurmctld + N JUWELS Booster slurmd (1..128;
#                                     # without N: 2, or the running lab's N if bigger)
#                                     # + 2 nodes of each other site (below); a lab up with
#                                     # another N is grown or shrunk to N in place
#   bash scripts/cluster.sh down      # stop what `up` started, remove namespaces and bridges
#   bash scripts/cluster.sh status    # faults and killed nodes, then sinfo
#   bash scripts/cluster.sh kill-node NODE    # NODE dies as hardware dies (below)
#   bash scripts/cluster.sh revive-node NODE  # NODE back: network, slurmd, resumed in Slurm
#   bash scripts/cluster.sh fault NODE[,NODE...] fabric-down|fabric-up  # fabric port dead/back,
#                                     # the node alive (management, slurmd, processes)
#   bash scripts/cluster.sh fault NODE[,NODE...] flap SECONDS  # fabric down, up after SECONDS
#   bash scripts/cluster.sh fault controller-stop SECONDS     # slurmctld SIGSTOP, SIGCONT after
#
# Strict like a real site (a test that passes only because the lab is kinder than a cluster
# is a defect of the lab):
#   - tasks are bound to cores (TaskPlugin=task/affinity); each node declares the cores this
#     machine really has (all nodes share them), so a task's Cpus_allowed_list is what Slurm
#     gave it: a job that asks for 1 CPU per node runs every worker on one core, as on JSC;
#   - every node has its own /tmp (node-local, as on real nodes): job files belong on the
#     shared filesystem, never in /tmp;
#   - an ordinary user ($lab_user) can submit jobs, beside root;
#   - accounting as real sites run it: slurmdbd on a real MariaDB, associations enforced
#     (root and $lab_user in account $lab_account), so `sacct` answers (submitit relies on it);
#     a fresh controller starts with a fresh database, so job ids never repeat in `sacct`;
#   - each node's /etc/hosts is Debian-style (own hostname -> 127.0.1.1 first, then the
#     cluster entry): JWB_CLUSTER_HOSTS=plain leaves the 127.0.1.1 line out.
#
# Layout (all on this machine, shared filesystem), two networks as sites have:
#   host netns ("login node"): munged, slurmctld and slurmdbd (own UTS ns, hostname jwbctl),
#     MariaDB for accounting (127.0.0.1:$db_port, data in $state/mysql),
#     bridge jwbbr0 10.66.0.254/16 (the fabric: InfiniBand, Slingshot) and
#     bridge jwbmg0 10.67.0.254/16 (the management Ethernet: jwbctl resolves to this address)
#   netns jwbKKKK (one per node, K = 1..N as 4 digits, as JUWELS Booster's jwb0001..jwb0936):
#     slurmd in its own UTS ns (hostname jwbKKKK) and mount ns
#     jwbKKKKi  veth on jwbbr0, 10.66.0.K/16  <- the fabric: what the jobs must use
#     eth0      veth on jwbmg0, 10.67.0.K/16  <- management: what the hostname jwbKKKK resolves
#                                               to, Slurm's NodeAddr (slurmctld, srun, sbcast);
#                                               it works, slowly ($mgmt_shape): a job
#                                               that rendezvouses by hostname trains over it
#                                               (as on JSC, where the hostname is not the IB name)
# Other sites' nodes, in the same cluster, on the same bridges, each site in a partition of its
# own (JWB_CLUSTER_SITES="jupiter cray fqdn" is the default; empty: JUWELS Booster only):
#   jupiter: jpbo-001-0K; ib0 10.66.1.K/16 = jpbo-001-0K-interconnect-1.jupiter.internal (the
#     fabric); eth0 on jwbmg0 10.67.1.K/16 = jpbo-001-0K (management, NodeAddr)
#   cray: nid00000K; hsn0..hsn3 10.66.(20+J).K/16, four NICs in one subnet, the nid name
#     resolving to all four (arp_ignore=1, arp_announce=2, a routing table per NIC: each
#     address answered by and answering from its own NIC); nmn0 on jwbmg0 10.67.2.K/16 =
#     nid00000K-nmn (management, NodeAddr)
#   fqdn: lrdn000K (Slurm's NodeName), hostname lrdn000K.leonardo.local (NodeHostname); eth0
#     10.66.3.K/16, both names resolve to it: one network (NodeAddr too), as the site modelled
#     has (a hostname that is the fabric's name); no management network, no fabric faults; a
#     host route to the controller's management address via its fabric address
# Host-side veth ends: fabric jwbKKKKp, jwbjKp, jwbcKpJ, jwbfKp; management jwbKKKKm, jwbjKm,
# jwbcKm (Linux caps names at 15 characters).
# Each node's /etc/hosts holds what its site's DNS answers for the controller and that site's
# nodes; the controller's holds every site's.
# The daemons (and so every job and container) see a private /etc/hosts bound over /etc/hosts and
# a private /tmp in their mount namespace; the host's /etc/hosts is never edited. Nothing is routed off the machine:
# node namespaces have no default route and no NAT rule is added.
# `up` and `down` are idempotent; `down` only stops processes whose PIDs `up` recorded and the
# processes inside our node namespaces.
set -euo pipefail

# Close every descriptor inherited from the caller (but stdin, stdout, stderr and bash's own
# 255, the script): the daemons started below would keep them open for as long as they run, and
# a lock the caller holds would stay held with them. `flock /work/lab.lock cluster.sh up` passes
# its lock as fd 3: munged, MariaDB and slurmdbd kept it, and every later flock waited forever.
for fd in "/proc/$$/fd/"*; do
    fd=${fd##*/}
    case $fd in 0|1|2|255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
done

prog=cluster.sh
state=${JWB_CLUSTER_STATE:-/run/torchrun-jsc-cluster}
conf_dir=/etc/slurm
bridge=jwbbr0       # the fabric (InfiniBand, Slingshot on the sites the lab plays)
mgmt_bridge=jwbmg0  # the management Ethernet: Slurm's NodeAddr, what the hostnames resolve to
ctl_name=jwbctl
ctl_addr=10.67.0.254         # the controller (and login node) on the management network
ctl_fabric_addr=10.66.0.254  # the same host on the fabric
# The management links' shape (both ends of every node's management veth). A site's management
# network is 1 GbE beside a 100-400 Gb/s fabric; here the fabric veths carry ~20 Gbit/s, so
# 1 Gbit/s makes the wrong network really the slower one. No delay: this kernel has no netem,
# and Slurm's RPCs (small messages, many round trips, MessageTimeout=10 on a loaded 2-core
# machine) would pay any delay many times over; a rate limit they never feel. 1 Gbit/s, not
# 100 Mbit/s: sbcast (runtime.stage) sends the image over this network, and a 1 GB image at
# 100 Mbit/s would take 80 s per hop.
mgmt_shape="tbf rate 1gbit burst 512k latency 20ms"
max_nodes=128  # 10.66.0.K: K <= 253; 128 slurmd are about 1.3 GB (docs/development/cluster.md)
lab_user=jwbuser  # the ordinary user who submits jobs beside root
lab_account=lab
db_port=16033  # the lab's own MariaDB, loopback only; not 3306, so a site's MySQL is never touched
hosts_style=${JWB_CLUSTER_HOSTS:-debian}
slurmd_timeout=30  # a tenth of the sites' 300 s (write_configs says why)
message_timeout=10  # Slurm's default: RPCs on a loaded 2-core machine need it

die() { echo "$prog: $*" >&2; exit 1; }
node_name() { printf 'jwb%04d\n' "$1"; }

# --- The sites the lab plays (docs/development/cluster.md, "Other sites' networks") ----------
# JUWELS Booster's N nodes (partitions batch, the default, and urgent) and, beside them in the
# same cluster, site_size nodes of each site in JWB_CLUSTER_SITES (default all; empty: JUWELS
# only), each site in its own partition named after it. Each node's private /etc/hosts holds
# what its site's DNS would answer for the controller and that site's nodes.
known_sites="jupiter cray fqdn"
site_size=2

site_node() {  # site_node SITE K: the Slurm node name, also the name of its network namespace
    case $1 in
        juwels) node_name "$2" ;;
        jupiter) printf 'jpbo-001-%02d\n' "$2" ;;  # JUPITER Booster: jpbo-RACK-NODE
        cray) printf 'nid%06d\n' "$2" ;;           # HPE Cray EX
        fqdn) printf 'lrdn%04d\n' "$2" ;;          # Leonardo: hostname lrdn0001.leonardo.local
    esac
}

site_hostname() {  # site_hostname SITE K: the node's hostname (Slurm's NodeHostname)
    if [ "$1" = fqdn ]; then echo "$(site_node "$@").leonardo.local"; else site_node "$@"; fi
}

site_addr() {  # site_addr SITE K: the address Slurm reaches the node at (NodeAddr)
    case $1 in  # the management network; Leonardo's nodes have one network (the fabric)
        juwels) echo "10.67.0.$2" ;;
        jupiter) echo "10.67.1.$2" ;;
        cray) echo "10.67.2.$2" ;;
        fqdn) echo "10.66.3.$2" ;;
    esac
}

site_dns() {  # site_dns SITE K: the /etc/hosts lines the site's DNS has for node K
    local name
    name=$(site_node "$@")
    case $1 in
        juwels) echo "10.67.0.$2 $name"; echo "10.66.0.$2 ${name}i" ;;
        jupiter) echo "10.67.1.$2 $name"; echo "10.66.1.$2 $name-interconnect-1.jupiter.internal" ;;
        cray)  # the nid name: every Slingshot NIC's address (Cray-HPE/docs-csm#4513)
            echo "10.67.2.$2 $name-nmn"
            for j in 0 1 2 3; do echo "10.66.$((20 + j)).$2 $name"; done ;;
        fqdn) echo "10.66.3.$2 $(site_hostname "$@") $name" ;;
    esac
}

site_fabric_ifs() {  # site_fabric_ifs SITE K: host-side ends on the fabric (<= 15 characters)
    case $1 in
        juwels) echo "$(node_name "$2")p" ;;
        jupiter) echo "jwbj$2p" ;;
        cray) echo "jwbc$2p0 jwbc$2p1 jwbc$2p2 jwbc$2p3" ;;
        fqdn) echo "jwbf$2p" ;;
    esac
}

site_mgmt_if() {  # site_mgmt_if SITE K: the host-side end on the management network (or none)
    case $1 in
        juwels) echo "$(node_name "$2")m" ;;
        jupiter) echo "jwbj$2m" ;;
        cray) echo "jwbc$2m" ;;
        fqdn) ;;  # one network
    esac
}

site_host_ifs() {  # site_host_ifs SITE K: every host-side end of the node's links
    local ifs
    ifs="$(site_fabric_ifs "$@") $(site_mgmt_if "$@")"
    echo "${ifs% }"
}

lab_nodes() {  # lab_nodes N SITES: "SITE K" for every node of that layout
    local k s
    for k in $(seq 1 "$1"); do echo "juwels $k"; done
    for s in $2; do
        for k in $(seq 1 "$site_size"); do echo "$s $k"; done
    done
}

node_names() {  # "SITE K" lines on stdin -> their Slurm node names, one a line
    local site k
    while read -r site k; do site_node "$site" "$k"; done
}

all_nodes() {  # every node any layout can have (what `down` looks for)
    lab_nodes "$max_nodes" "$known_sites"
}

wanted_sites() {  # JWB_CLUSTER_SITES (default all), checked, in the order of known_sites
    local s out=""
    for s in ${JWB_CLUSTER_SITES-$known_sites}; do
        [[ " $known_sites " == *" $s "* ]] ||
            die "JWB_CLUSTER_SITES: unknown site '$s' (known: $known_sites)"
    done
    for s in $known_sites; do
        [[ " ${JWB_CLUSTER_SITES-$known_sites} " == *" $s "* ]] && out+="${out:+ }$s"
    done
    echo "$out"
}

pid_alive() {  # pid_alive PIDFILE COMM: true if the recorded process still runs that program
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

running_nodes() {  # names of node namespaces that exist, in order
    local site k name
    while read -r site k; do
        name=$(site_node "$site" "$k")
        [ -e "/run/netns/$name" ] && echo "$name"
    done < <(all_nodes)
    return 0
}

wait_until() {  # wait_until SECONDS CMD...: poll CMD every 0.2 s
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    [ -f /etc/munge/munge.key ] || die "no /etc/munge/munge.key: run 'make setup' first"
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged 9>&-  # the daemon must not keep our lock (fd 9)
    wait_until 10 sh -c 'munge -n </dev/null | unmunge' || die "munged did not come up"
    # ours: down stops it. munged's own PID file, not pgrep: right after the start pgrep also
    # sees the daemonizing parent (and maybe an old munged still exiting).
    cp /run/munge/munged.pid "$state/munged.pid"
    pid_alive "$state/munged.pid" munged || die "munged is up but /run/munge/munged.pid is not its PID"
}

write_configs() {  # write_configs N SITES
    local n=$1 sites=$2 k cores site name nodes
    # The cores this machine really has: declaring more makes task/affinity fail to lay out
    # tasks ("only 2 bits in avail_map for 4 tasks"), declaring them honestly makes binding real.
    cores=$(nproc --all)
    mkdir -p "$conf_dir" "$state/dev" "$state/log" "$state/ctld"
    for k in 0 1 2 3; do  # fake GPUs: GRES needs character devices (c 1 3 is /dev/null's)
        [ -c "$state/dev/nvidia$k" ] || mknod "$state/dev/nvidia$k" c 1 3
    done
    {
        echo "# generated by scripts/cluster.sh up $n, sites '$sites' (torchrun-jsc-cluster); do not edit"
        echo "ClusterName=jwbcluster"
        echo "SlurmctldHost=$ctl_name($ctl_addr)"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "StateSaveLocation=$state/ctld"
        echo "SlurmdSpoolDir=$state/spool/%n"
        echo "SlurmctldPidFile=$state/slurmctld.daemon.pid"
        echo "SlurmdPidFile=$state/spool/%n/slurmd.pid"
        echo "SlurmctldLogFile=$state/log/slurmctld.log"
        echo "SlurmdLogFile=$state/log/slurmd-%n.log"
        # No cgroups: this machine (and CI) has no systemd, and the nodes share one cgroup
        # hierarchy, where Debian's slurmd (not built for multiple slurmd) would put the same
        # job's steps of two nodes into one cgroup. Binding is by affinity.
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/affinity"  # bind tasks to cores, as real sites do
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/slurmdbd"
        echo "AccountingStorageHost=$ctl_addr"
        echo "AccountingStorageEnforce=associations"
        echo "MailProg=/bin/true"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SchedulerParameters=sched_interval=2,sched_min_interval=0,batch_sched_delay=0"
        echo "SlurmdParameters=config_overrides"
        # Every task of every step carries an MPI rank variable, as on real sites that set
        # MpiDefault=pmix (PMIX_RANK, ...): a kit that took a per-node agent for a rank because
        # of it (issue 26) fails here. psslurm's PMI_RANK is not played by a TaskProlog: under
        # pyxis, slurmd runs the TaskProlog inside the container, where it is missing
        # (NVIDIA/pyxis#83, #163); the ring-2 tests run the agent under PMI_RANK instead.
        echo "MpiDefault=pmix"
        echo "KillWait=2"
        echo "InactiveLimit=0"
        echo "MinJobAge=300"
        # How Slurm notices a dead node (scripts/cluster.sh kill-node): slurmctld pings each
        # slurmd every SlurmdTimeout/3 s and sets one that has not answered for SlurmdTimeout
        # s DOWN ("Not responding"), which ends a job on it (or, with --no-kill, its steps
        # there). Sites start from Slurm's configurator template: SlurmdTimeout=300,
        # SlurmctldTimeout=120, MessageTimeout 10, TCPTimeout 2 (the slurm.conf man page's
        # defaults); the lab runs the node timeouts a tenth as long (a node dead for 30 s is
        # DOWN, as one dead for 300 s on a site) and keeps the per-message ones: an RPC on a
        # loaded 2-core machine needs them. The kit's own heartbeat (job.spare_nodes) must find a lost node
        # well before this (docs/guide/spare-nodes.md); torch's rendezvous drops a silent
        # agent after 15 s (keep-alive every 5 s, 3 misses).
        echo "SlurmctldTimeout=30"
        echo "SlurmdTimeout=$slurmd_timeout"
        echo "MessageTimeout=$message_timeout"
        echo "TCPTimeout=2"
        # A node that was DOWN comes back when its slurmd registers again (revive-node).
        echo "ReturnToService=2"
        echo "GresTypes=gpu"
        while read -r site k; do
            echo "NodeName=$(site_node "$site" "$k") NodeHostname=$(site_hostname "$site" "$k")" \
                 "NodeAddr=$(site_addr "$site" "$k") Sockets=1 CoresPerSocket=$cores" \
                 "ThreadsPerCore=1 RealMemory=16000 Gres=gpu:4 State=UNKNOWN"
        done < <(lab_nodes "$n" "$sites")
        # Preemption as sites configure it: a job in `urgent` takes the nodes of jobs in `batch`,
        # which get GraceTime seconds and the job's own --signal at once (send_user_signal;
        # without a --signal, SIGTERM), then are requeued (tests/lab/test_requeue.py).
        echo "PreemptType=preempt/partition_prio"
        echo "PreemptMode=REQUEUE"
        echo "PreemptParameters=send_user_signal"
        echo "PartitionName=batch Nodes=jwb[0001-$(printf '%04d' "$n")] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60"
        echo "PartitionName=urgent Nodes=jwb[0001-$(printf '%04d' "$n")] MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF"
        for site in $sites; do  # the other sites' nodes: only jobs that name the partition
            nodes=$(lab_nodes 0 "$site" | node_names | paste -sd, -)
            echo "PartitionName=$site Nodes=$nodes MaxTime=INFINITE State=UP"
        done
    } >"$conf_dir/slurm.conf.tmp"
    echo "Name=gpu File=$state/dev/nvidia[0-3]" >"$conf_dir/gres.conf.tmp"
    (
        umask 077  # slurmdbd refuses a slurmdbd.conf that others can read (it holds a password)
        {
            echo "# generated by scripts/cluster.sh up $n (torchrun-jsc-cluster); do not edit"
            echo "AuthType=auth/munge"
            echo "DbdHost=$ctl_name"
            echo "DbdAddr=$ctl_addr"
            echo "SlurmUser=root"
            echo "StorageType=accounting_storage/mysql"
            echo "StorageHost=127.0.0.1"
            echo "StoragePort=$db_port"
            echo "StorageUser=slurm"
            echo "StoragePass=$(db_password)"
            echo "StorageLoc=slurm_acct_db"
            echo "LogFile=$state/log/slurmdbd.log"
            echo "PidFile=$state/slurmdbd.daemon.pid"
        } >"$conf_dir/slurmdbd.conf.tmp"
    )
    # srun --mpi=pmix: the client tmpdir must differ per node; every node's /tmp is its own.
    # Apptainer binds /tmp: ranks in containers use it as their session directory.
    echo "PMIxCliTmpDirBase=/tmp" >"$conf_dir/mpi.conf.tmp"
    # The controller (and the login node, this host) resolves every site's names.
    write_hosts "$ctl_name" "$ctl_name" < <(lab_nodes "$n" "$sites") >"$state/hosts-$ctl_name.tmp"
    while read -r site k; do
        write_hosts "$(site_node "$site" "$k")" "$(site_hostname "$site" "$k")" \
            < <(lab_nodes "$n" "$sites" | grep "^$site ") >"$state/hosts-$(site_node "$site" "$k").tmp"
    done < <(lab_nodes "$n" "$sites")
    mv -f "$conf_dir/slurm.conf.tmp" "$conf_dir/slurm.conf"
    mv -f "$conf_dir/gres.conf.tmp" "$conf_dir/gres.conf"
    mv -f "$conf_dir/mpi.conf.tmp" "$conf_dir/mpi.conf"
    mv -f "$conf_dir/slurmdbd.conf.tmp" "$conf_dir/slurmdbd.conf"
    for name in "$ctl_name" $(lab_nodes "$n" "$sites" | node_names); do
        if [ -e "$state/hosts-$name" ]; then
            # a running daemon has this file bound over its /etc/hosts (a bind mount holds the
            # inode): a resized lab's nodes must see the new names, so rewrite it in place
            cat "$state/hosts-$name.tmp" >"$state/hosts-$name"
            rm -f "$state/hosts-$name.tmp"
        else
            mv -f "$state/hosts-$name.tmp" "$state/hosts-$name"
        fi
    done
}

db_password() {  # the database password of this lab, made once (root-only file)
    [ -s "$state/db.pass" ] || (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$state/db.pass")
    cat "$state/db.pass"
}

# start_accounting: a fresh MariaDB (data in $state/mysql) and slurmdbd on it, then the cluster,
# the lab account and its users. Called only when the controller starts fresh (slurmctld -c),
# so the job ids the database holds never repeat.
start_accounting() {
    local db=$state/mysql sock=$state/mysql/mysql.sock  # mysql-owned: mariadbd runs as mysql
    command -v mariadbd >/dev/null || command -v /usr/sbin/mariadbd >/dev/null ||
        die "mariadbd not installed (accounting needs MariaDB): run 'make setup' first"
    command -v slurmdbd >/dev/null || die "slurmdbd not installed: run 'make setup' first"
    stop_pid "$state/slurmdbd.pid" slurmdbd
    stop_pid "$state/mariadbd.pid" mariadbd
    rm -rf "$db" && mkdir -p "$db" && chown mysql:mysql "$db"
    mariadb-install-db --no-defaults --user=mysql --datadir="$db/data" \
        --auth-root-authentication-method=socket --skip-test-db >"$state/log/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed (see $state/log/mariadb-install.log)"
    setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$db/data" --socket="$sock" \
        --bind-address=127.0.0.1 --port="$db_port" --log-error="$db/mariadb.log" \
        </dev/null >/dev/null 2>&1 9>&- &
    echo $! >"$state/mariadbd.pid"
    wait_until 60 mariadb --no-defaults --socket="$sock" -e 'select 1' ||
        die "MariaDB did not come up in 60 s (see $db/mariadb.log)"
    mariadb --no-defaults --socket="$sock" -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(db_password)';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not create the slurm database user"
    run_in_ns "$state/slurmdbd.pid" "$state/log/slurmdbd.out" host "$ctl_name" "$ctl_name" \
        slurmdbd -D
    wait_until 60 sacctmgr -n list cluster ||
        { tail -n 5 "$state/log/slurmdbd.log" >&2 || true; die "slurmdbd did not answer in 60 s (logs in $state/log)"; }
    sacctmgr -i -Q add cluster jwbcluster >/dev/null
    sacctmgr -i -Q add account "$lab_account" cluster=jwbcluster Description=lab Organization=lab >/dev/null
    sacctmgr -i -Q add user root "$lab_user" account="$lab_account" cluster=jwbcluster >/dev/null
}

# write_hosts NAME HOSTNAME < "SITE K" lines: the private /etc/hosts of daemon NAME (hostname
# HOSTNAME): the login node, then the DNS entries of the nodes on stdin.
write_hosts() {
    local self=$1 host=$2 site k login_name
    login_name=$(hostname)
    case $login_name in localhost|"$ctl_name"|jwb[0-9][0-9][0-9][0-9]*) login_name="" ;; esac
    echo "# private /etc/hosts of $self in the torchrun-jsc-cluster ($hosts_style style)"
    echo "127.0.0.1 localhost"
    # Debian/Ubuntu installers map the machine's own name to 127.0.1.1 (an FQDN hostname
    # first, then its short name); with glibc's `multi on` (Debian's /etc/host.conf) the name
    # then resolves to 127.0.1.1 AND its address.
    if [ "$hosts_style" = plain ]; then :
    elif [ "$host" = "${host%%.*}" ]; then echo "127.0.1.1 $host"
    else echo "127.0.1.1 $host ${host%%.*}"
    fi
    echo "::1 localhost ip6-localhost ip6-loopback"
    # The login node (this host, where sbatch/srun/salloc run) by its own name, as a site's
    # controller and nodes resolve their login nodes: Slurm 24.11 answers an srun started
    # here at the name it reports (22.05 used the address).
    echo "$ctl_addr $ctl_name${login_name:+ $login_name}"
    while read -r site k; do site_dns "$site" "$k"; done
}

ensure_lab_user() {  # an ordinary user, same UID on every node (the nodes share /etc/passwd)
    id "$lab_user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$lab_user"
}

setup_bridge() {  # setup_bridge BRIDGE ADDR: the bridge, with the controller's ADDR/16 on it
    ip link show "$1" >/dev/null 2>&1 || ip link add "$1" type bridge
    local addrs  # not `ip | grep -q`: with pipefail, grep's early exit can fail the pipeline
    addrs=$(ip -o addr show dev "$1")
    [[ "$addrs" == *" $2/"* ]] || ip addr add "$2/16" dev "$1"
    ip link set "$1" up
}

# add_veth NETNS HOST_IF NODE_IF CIDR [BRIDGE]: a NIC of the node, its peer on BRIDGE (default:
# the fabric). Also what brings a node's links back up (revive-node, fault fabric-up, up).
add_veth() {
    local ns=$1 host_if=$2 node_if=$3 cidr=$4 br=${5:-$bridge}
    if ! ip -n "$ns" link show "$node_if" >/dev/null 2>&1; then
        ip link del "$host_if" 2>/dev/null || true
        ip link add "$host_if" type veth peer name "$node_if" netns "$ns"
        ip -n "$ns" addr add "$cidr" dev "$node_if"
    fi
    ip link set "$host_if" master "$br"
    ip link set "$host_if" up
    ip -n "$ns" link set "$node_if" up
}

add_mgmt() {  # add_mgmt NETNS HOST_IF NODE_IF ADDR: the management NIC, shaped ($mgmt_shape)
    add_veth "$1" "$2" "$3" "$4/16" "$mgmt_bridge"
    # shellcheck disable=SC2086  # the shape is words
    tc qdisc replace dev "$2" root $mgmt_shape
    # shellcheck disable=SC2086
    tc -n "$1" qdisc replace dev "$3" root $mgmt_shape
}

setup_node_net() {  # setup_node_net SITE K
    local site=$1 k=$2 name j addr
    name=$(site_node "$site" "$k")
    [ -e "/run/netns/$name" ] || ip netns add "$name"
    ip -n "$name" link set lo up
    case $site in
        juwels)
            add_veth "$name" "${name}p" "${name}i" "10.66.0.$k/16"
            add_mgmt "$name" "${name}m" eth0 "10.67.0.$k" ;;
        jupiter)
            add_veth "$name" "jwbj${k}p" ib0 "10.66.1.$k/16"
            add_mgmt "$name" "jwbj${k}m" eth0 "10.67.1.$k" ;;
        cray)
            # Four NICs in one subnet. Linux answers ARP for any of its addresses on every
            # interface (and sends everything out of the first route's NIC): arp_ignore=1 makes
            # each NIC answer only for its own address, arp_announce=2 asks with the NIC's own
            # address, and a routing table per NIC (selected by source address) sends replies
            # out of the NIC they belong to; rp_filter loose, as on multi-rail nodes.
            nsenter --net="/run/netns/$name" sysctl -q -w net.ipv4.conf.all.arp_ignore=1 \
                net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=2 \
                net.ipv4.conf.default.rp_filter=2
            for j in 0 1 2 3; do
                addr="10.66.$((20 + j)).$k"
                add_veth "$name" "jwbc${k}p$j" "hsn$j" "$addr/16"
                ip -n "$name" route replace 10.66.0.0/16 dev "hsn$j" src "$addr" table $((100 + j))
                [ -n "$(ip -n "$name" rule show from "$addr" table $((100 + j)))" ] ||
                    ip -n "$name" rule add from "$addr" table $((100 + j))
            done
            add_mgmt "$name" "jwbc${k}m" nmn0 "10.67.2.$k" ;;
        fqdn)
            add_veth "$name" "jwbf${k}p" eth0 "10.66.3.$k/16"
            # one network: the controller (and login node) at its management address is
            # reached over it, as a single-network site's controller sits on its only network
            ip -n "$name" route replace "$ctl_addr/32" via "$ctl_fabric_addr" dev eth0 ;;
    esac
}

# static_neighbours N: every JUWELS Booster node knows the controller and the other N-1 nodes on
# both networks (`i` addresses on the fabric, management addresses on eth0) with their MACs
# (permanent neighbour entries), so no ARP runs between them.
# All nodes share this one kernel: a gloo full mesh on 64 nodes sends 64 x 63 ARP requests at
# once, each flooded to every port of the bridge, past the kernel's receive backlog
# (netdev_max_backlog, 1000 packets per core); the dropped requests ended connects with "No
# route to host" (gloo gives up after 3 tries). Real nodes resolve their peers on their own.
# The management network gets the same: a plain torchrun by hostname runs its mesh over it.
static_neighbours() {
    local n=$1 k j name lines fab_ctl mgmt_ctl
    local -a fab=() mgmt=()
    fab_ctl=$(link_mac host "$bridge")
    mgmt_ctl=$(link_mac host "$mgmt_bridge")
    for k in $(seq 1 "$n"); do
        printf -v name 'jwb%04d' "$k"
        fab[k]=$(link_mac "$name" "${name}i")
        mgmt[k]=$(link_mac "$name" eth0)
    done
    for k in $(seq 1 "$n"); do
        printf -v name 'jwb%04d' "$k"
        lines="neigh flush dev ${name}i nud permanent"$'\n'
        lines+="neigh flush dev eth0 nud permanent"$'\n'
        lines+="neigh replace $ctl_fabric_addr lladdr $fab_ctl dev ${name}i nud permanent"$'\n'
        lines+="neigh replace $ctl_addr lladdr $mgmt_ctl dev eth0 nud permanent"$'\n'
        for j in $(seq 1 "$n"); do
            [ "$j" != "$k" ] || continue
            lines+="neigh replace 10.66.0.$j lladdr ${fab[j]} dev ${name}i nud permanent"$'\n'
            lines+="neigh replace 10.67.0.$j lladdr ${mgmt[j]} dev eth0 nud permanent"$'\n'
        done
        ip -n "$name" -batch - <<<"$lines"
    done
}

link_mac() {  # link_mac NETNS|host IF: the interface's MAC address
    local out
    if [ "$1" = host ]; then out=$(ip -o link show dev "$2"); else out=$(ip -n "$1" -o link show dev "$2"); fi
    out=${out#*link/ether }
    echo "${out%% *}"
}

# run_in_ns PIDFILE LOG NETNS NODE HOSTNAME CMD...: start CMD in the foreground of a new UTS +
# mount namespace (hostname set, node NODE's private /etc/hosts bound, its own /tmp), detached,
# in /, and record its PID. In /: a daemon started from a directory that is later removed (a
# test's temporary one) made slurmstepd fail "Unable to get current working directory".
run_in_ns() {
    local pidfile=$1 log=$2 netns=$3 node=$4 hostname=$5; shift 5
    local enter=() tmp
    tmp="$state/node/$node/tmp"
    [ "$netns" = host ] || enter=(nsenter "--net=/run/netns/$netns" --)
    mkdir -p "$tmp"
    chmod 1777 "$tmp"  # like /tmp: every user may write, nobody may remove another's files
    # nsenter (no pid ns) and unshare (no --fork) exec in place, so $! ends up as the daemon's PID.
    # shellcheck disable=SC2016  # $1.. expand in the inner sh
    setsid "${enter[@]}" unshare --uts --mount --propagation slave -- \
        sh -c 'cd / && hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /tmp &&
               shift 3 && exec "$@"' \
        sh "$hostname" "$state/hosts-$node" "$tmp" "$@" </dev/null >>"$log" 2>&1 9>&- &
    echo $! >"$pidfile"
}

all_ready() {  # all_ready N: sinfo shows N nodes, all responding and usable (maybe busy)
    local out
    # one line per node and partition: each node once; reserved: idle in a reservation (the
    # second test lane's nodes, tests/helpers/lanes.py)
    out=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
    [ "$(grep -c -E ' (idle|mixed|allocated|completing|reserved)$' <<<"$out")" -eq "$1" ]
}

# ready_or_resume N: all_ready N; if not, resume the nodes Slurm holds drained or down (their
# slurmd runs: `up` just started it or found it alive). Jobs that overloaded the machine's 2
# cores left such nodes ("Kill task failed", "Not responding"), and the controller keeps them
# across a restart with its saved state; on a real site an admin would resume them.
ready_or_resume() {
    local bad
    all_ready "$1" && return 0
    bad=$(sinfo -h -N -t drain,down -o %N 2>/dev/null | sort -u | paste -sd, -) || bad=""
    [ -z "$bad" ] || scontrol update nodename="$bad" state=resume >/dev/null 2>&1 || true
    return 1
}

cmd_up() {
    local n site k name sites current='' current_sites='' started=$SECONDS keep_state='' was=''
    sites=$(wanted_sites)
    if [ -s "$state/nodes" ] && [ ! -e "$state/sites" ]; then
        # an older cluster.sh's lab (JUWELS only, no record of sites): lay it out anew
        echo "$prog: the running cluster predates the site layouts: restarting it"
        cmd_down >/dev/null
    fi
    if [ -s "$state/nodes" ] && ! ip link show "$mgmt_bridge" >/dev/null 2>&1; then
        # an older cluster.sh's lab (hostnames on taps nobody reaches): lay it out anew
        echo "$prog: the running cluster predates the management network: restarting it"
        cmd_down >/dev/null
    fi
    controller_cont >/dev/null  # a controller stopped by `fault controller-stop` runs again
    [ -s "$state/nodes" ] && current=$(cat "$state/nodes")
    [ -e "$state/sites" ] && current_sites=$(cat "$state/sites")
    if [ $# -ge 1 ]; then
        n=$1
        if ! [[ "$n" =~ ^[1-9][0-9]{0,2}$ ]] || [ "$n" -gt "$max_nodes" ]; then
            die "node count must be 1..$max_nodes, got '$n'"
        fi
    else
        # the running lab's size when it is bigger: a test run (tests/conftest.py calls `up`)
        # must not shrink a lab that someone grew
        n=2
        [ -n "$current" ] && [ "$current" -gt 2 ] && n=$current
    fi
    if [ -n "$current" ] && [ "$current_sites" != "$sites" ]; then
        die "cluster is up with sites '$current_sites', asked for '$sites' (JWB_CLUSTER_SITES):" \
            "run '$0 down' first"
    fi
    command -v slurmctld >/dev/null || die "slurmctld not installed: run 'make setup' first"
    mkdir -p "$state"
    if [ -n "$current" ] && [ "$current" != "$n" ]; then
        resize "$current" "$n" "$sites"
        was=" (resized from $current)"
        keep_state=1
    fi
    echo "$n" >"$state/nodes"
    echo "$sites" >"$state/sites"
    if pid_alive "$state/slurmctld.pid" slurmctld && [ -s "$state/hosts-$ctl_name" ]; then
        : # configs already written for this cluster; keep them (slurmctld has them loaded)
    else
        write_configs "$n" "$sites"
    fi
    ensure_lab_user
    start_munge
    setup_bridge "$bridge" "$ctl_fabric_addr"
    setup_bridge "$mgmt_bridge" "$ctl_addr"
    while read -r site k; do setup_node_net "$site" "$k"; done < <(lab_nodes "$n" "$sites")
    static_neighbours "$n"
    clear_faults  # every node's links are up again (above), slurmctld continued
    if ! pid_alive "$state/slurmctld.pid" slurmctld; then
        if [ -n "$keep_state" ] && pid_alive "$state/slurmdbd.pid" slurmdbd; then
            # resized: the same controller state (jobs, next job id) and accounting database
            run_in_ns "$state/slurmctld.pid" "$state/log/slurmctld.out" host "$ctl_name" \
                "$ctl_name" slurmctld -D
        else
            # A clean state (no stale jobs or nodes from an earlier `up`, nothing an older Slurm
            # wrote: 24.11 refuses 22.05's state files) and a fresh accounting database.
            rm -rf "$state/ctld" && mkdir -p "$state/ctld"
            start_accounting
            run_in_ns "$state/slurmctld.pid" "$state/log/slurmctld.out" host "$ctl_name" \
                "$ctl_name" slurmctld -D -c
        fi
    fi
    while read -r site k; do
        name=$(site_node "$site" "$k")
        mkdir -p "$state/spool/$name"
        pid_alive "$state/slurmd-$name.pid" slurmd && continue
        run_in_ns "$state/slurmd-$name.pid" "$state/log/slurmd-$name.out" "$name" "$name" \
            "$(site_hostname "$site" "$k")" slurmd -D -N "$name"
    done < <(lab_nodes "$n" "$sites")
    # about 0.2 s of CPU per slurmd start and registration: a big lab needs longer on 2 cores
    if ! wait_until $((60 + n)) ready_or_resume "$(lab_nodes "$n" "$sites" | wc -l)"; then
        sinfo -N >&2 || true
        tail -n 5 "$state"/log/*.log >&2 || true
        die "nodes not ready after $((60 + n)) s (logs in $state/log)"
    fi
    echo "$prog: up: $n nodes$([ -z "$sites" ] || echo " and sites $sites")$was" \
         "($(running_nodes | summarize_names)) in $((SECONDS - started)) s"
}

summarize_names() {  # node names on stdin -> one line; runs of jwbKKKK as jwb[0001-0064]
    awk 'function range(a, b) {
             return a == b ? sprintf("jwb%04d", a) : sprintf("jwb[%04d-%04d]", a, b) }
         /^jwb[0-9][0-9][0-9][0-9]$/ {
             k = substr($0, 4) + 0
             if (n && k == last + 1) { last = k; next }
             if (n) { out = out sep range(first, last); sep = " " }
             first = k; last = k; n = 1; next }
         { other = other " " $0 }
         END { if (n) out = out sep range(first, last); print out other }'
}

# resize OLD NEW SITES: bring a lab laid out for OLD JUWELS Booster nodes to NEW, in place:
# munge, MariaDB, slurmdbd (and so the accounting and the job ids) stay; slurmctld and every
# slurmd stop (job steps run on: slurmstepd is its own process) and start again on the new
# configuration (cmd_up), the controller with its saved state. Nodes beyond NEW are removed;
# refused while jobs run on them.
resize() {
    local old=$1 new=$2 sites=$3 site k name busy pidfile
    if [ "$new" -lt "$old" ] && pid_alive "$state/slurmctld.pid" slurmctld; then
        busy=$(squeue -h -w "jwb[$(printf '%04d' $((new + 1)))-$(printf '%04d' "$old")]" \
            -o %i 2>/dev/null | paste -sd, -) || true
        [ -z "$busy" ] || die "cannot shrink to $new nodes: job(s) $busy run on nodes" \
            "beyond jwb$(printf '%04d' "$new") (wait for them or scancel them)"
    fi
    # TERM first so that they stop in parallel; stop_pid then waits for each
    for pidfile in "$state"/slurmd-*.pid "$state/slurmctld.pid"; do
        pid_alive "$pidfile" "$(basename "$pidfile" .pid | cut -d- -f1)" || continue
        kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
    done
    stop_pid "$state/slurmctld.pid" slurmctld
    while read -r site k; do
        stop_pid "$state/slurmd-$(site_node "$site" "$k").pid" slurmd
    done < <(lab_nodes "$old" "$sites")
    for k in $(seq $((new + 1)) "$old"); do
        remove_node juwels "$k"
        name=$(node_name "$k")
        rm -f "$state/hosts-$name"
        rm -rf "${state:?}/node/$name" "${state:?}/spool/$name"
    done
    write_configs "$new" "$sites"
}

stop_pid() {  # stop_pid PIDFILE COMM: TERM, wait up to 10 s, then KILL
    local pid
    pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || true
    wait_until 10 sh -c "! [ -d /proc/$pid ] || [ \"\$(cat /proc/$pid/comm 2>/dev/null)\" != '$2' ]" \
        || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$1"
}

kill_netns_procs() {  # every process in our node namespace is ours (slurmd, slurmstepd, jobs)
    local name=$1 pids
    pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// }" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    wait_until 10 sh -c "[ -z \"\$(ip netns pids $name)\" ]" || {
        pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -z "${pids// }" ] || kill -KILL $pids 2>/dev/null || true
    }
}

remove_node() {  # remove_node SITE K: its slurmd, every process in it, its namespace and links
    local name host_if
    name=$(site_node "$1" "$2")
    stop_pid "$state/slurmd-$name.pid" slurmd
    rm -f "$state/faults/$name" "$state/killed/$name"
    [ -e "/run/netns/$name" ] || return 0
    kill_netns_procs "$name"
    ip netns del "$name"
    for host_if in $(site_host_ifs "$1" "$2"); do ip link del "$host_if" 2>/dev/null || true; done
}

cmd_down() {
    local site k pidfile br
    clear_faults  # a stopped slurmctld would not act on its TERM
    # TERM every daemon first so that they shut down in parallel; stop_pid then waits for each.
    for pidfile in "$state"/slurmd-*.pid "$state/slurmctld.pid" "$state/slurmdbd.pid"; do
        pid_alive "$pidfile" "$(basename "$pidfile" .pid | cut -d- -f1)" || continue
        kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
    done
    while read -r site k; do  # every node any layout has, whatever JWB_CLUSTER_SITES says now
        remove_node "$site" "$k"
    done < <(all_nodes)
    stop_pid "$state/slurmctld.pid" slurmctld
    stop_pid "$state/slurmdbd.pid" slurmdbd
    stop_pid "$state/mariadbd.pid" mariadbd
    stop_pid "$state/munged.pid" munged
    for br in "$bridge" "$mgmt_bridge"; do
        if ip link show "$br" >/dev/null 2>&1; then ip link del "$br"; fi
    done
    rm -f "$state"/hosts-* "$state/nodes" "$state/sites"
    rm -rf "$state/node"  # the nodes' /tmp: node-local, gone with the node
    # the slurmds' spool: a fresh controller numbers jobs from 1 again, and a step socket left
    # there by an earlier lab's step 1.0 made the next step 1.0 fail ("Cannot bind() UNIX socket
    # .../stepd.slurm.pmix.1.0: Address already in use")
    rm -rf "$state/spool"
    echo "$prog: down"
}

cmd_status() {
    local nodes
    nodes=$(running_nodes | tr '\n' ' ')
    if [ -z "$nodes" ] || ! pid_alive "$state/slurmctld.pid" slurmctld; then
        echo "$prog: not up (node namespaces: ${nodes:-none})"
        return 3
    fi
    show_faults
    # a stopped controller answers nobody: sinfo would wait MessageTimeout and fail
    [ -z "$(fault_record controller)" ] || return 0
    sinfo
}

# --- A node that dies as hardware dies (docs/development/cluster.md, "Killing a node") ---------
# kill-node: the node's links on both bridges (fabric and management: a dead node is silent on
# both) go down first (so that nothing the dying processes' kernel sends, FIN or RST, reaches a
# peer: peers see silence, as with a dead node or a dead port), then every process of its
# namespace gets SIGKILL at once (slurmd, slurmstepd, the job's tasks and containers), until
# none is left. Slurm is told nothing: it notices by its own SlurmdTimeout, as it would on a
# site. revive-node: links up, slurmd started again, the node resumed in Slurm if Slurm had
# marked it down. A killed node is recorded in $state/killed/NODE.

node_site_k() {  # node_site_k NODE: "SITE K" of a node of the running layout, or fail
    local site k
    [ -s "$state/nodes" ] || die "cluster is not up"
    while read -r site k; do
        if [ "$(site_node "$site" "$k")" = "$1" ]; then echo "$site $k"; return 0; fi
    done < <(lab_nodes "$(cat "$state/nodes")" "$(cat "$state/sites" 2>/dev/null)")
    die "no node '$1' in this lab (nodes: $(lab_nodes "$(cat "$state/nodes")" \
        "$(cat "$state/sites" 2>/dev/null)" | node_names | paste -sd ' ' -))"
}

cmd_kill_node() {  # kill-node NODE
    local name=${1:-} site k host_if pids count=0 round
    [ -n "$name" ] || die "usage: $0 kill-node NODE"
    read -r site k < <(node_site_k "$name")
    [ -e "/run/netns/$name" ] || die "node $name has no network namespace: run '$0 up' first"
    # (a marker left from before an `up`, which restarts a killed node's slurmd, is stale)
    [ ! -e "$state/killed/$name" ] || pid_alive "$state/slurmd-$name.pid" slurmd ||
        die "node $name is already killed: $0 revive-node $name"
    for host_if in $(site_host_ifs "$site" "$k"); do ip link set "$host_if" down; done
    for round in $(seq 50); do  # processes that fork while we kill: again until none is left
        pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
        [ -n "${pids// }" ] || break
        [ "$round" -gt 1 ] || count=$(wc -w <<<"$pids")
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
    done
    [ -z "$(ip netns pids "$name" 2>/dev/null)" ] || die "processes of $name survived SIGKILL"
    rm -f "$state/slurmd-$name.pid" "$state/faults/$name"  # a fabric fault: now all is down
    mkdir -p "$state/killed"
    date +%s >"$state/killed/$name"
    echo "$prog: killed $name at $(date +%H:%M:%S): $count processes, links down" \
         "($(site_host_ifs "$site" "$k")); Slurm notices by SlurmdTimeout=$slurmd_timeout s;" \
         "back with: $0 revive-node $name"
}

node_state() {  # node_state NODE: Slurm's state of NODE (e.g. idle, down*, allocated)
    sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n 1
}

slurmd_started_since() {  # slurmd_started_since NODE EPOCH: slurmctld saw NODE's slurmd start then
    local when
    when=$(scontrol show node -o "$1" 2>/dev/null | sed -n 's/.* SlurmdStartTime=\([^ ]*\).*/\1/p')
    case $when in ""|None|Unknown) return 1 ;; esac
    [ "$(date -d "$when" +%s 2>/dev/null || echo 0)" -ge "$2" ]
}

cmd_revive_node() {  # revive-node NODE
    local name=${1:-} site k host_if state_now started
    [ -n "$name" ] || die "usage: $0 revive-node NODE"
    read -r site k < <(node_site_k "$name")
    setup_node_net "$site" "$k"  # idempotent: the links (both networks) up again
    if ! pid_alive "$state/slurmd-$name.pid" slurmd; then
        # The steps that died with the node left their PMIx sockets in its spool: a requeued
        # job (same job id, same step ids) placed on the node again failed to start its step
        # there ("Cannot bind() UNIX socket .../stepd.slurm.pmix.6.1: Address already in use",
        # CI run 8). A node comes back with no step running, as after a reboot.
        rm -rf -- "$state/spool/$name"/stepd.slurm.pmix.* "$state/spool/$name"/pmix.*
        started=$(date +%s)
        run_in_ns "$state/slurmd-$name.pid" "$state/log/slurmd-$name.out" "$name" "$name" \
            "$(site_hostname "$site" "$k")" slurmd -D -N "$name"
        # Registered = slurmctld holds this slurmd's start time. A node killed less than
        # SlurmdTimeout ago still looks fine in sinfo (no "*"), so its state alone says nothing:
        # a job placed on it before the new slurmd listens fails to launch its steps.
        wait_until 60 slurmd_started_since "$name" "$started" ||
            die "slurmd of $name did not register in 60 s (log: $state/log/slurmd-$name.log)"
    fi
    # ReturnToService=2 returns a down node when its slurmd registers; one that Slurm drained
    # meanwhile (or that was down for another reason) is resumed here.
    wait_until 60 sh -c "sinfo -h -N -n '$name' -o '%t' | grep -qvE '^\$|\\*\$'" ||
        die "slurmd of $name did not register in 60 s (log: $state/log/slurmd-$name.log)"
    state_now=$(node_state "$name")
    case $state_now in
        down*|drain*|fail*) scontrol update "NodeName=$name" State=RESUME ;;
    esac
    # resv: idle in a reservation (the second test lane's nodes, tests/helpers/lanes.py)
    wait_until 60 sh -c "sinfo -h -N -n '$name' -o '%t' | grep -qE '^(idle|mix|alloc|comp|resv)\$'" ||
        die "node $name is $(node_state "$name") in Slurm, not usable, 60 s after its slurmd started"
    rm -f "$state/killed/$name" "$state/faults/$name"
    echo "$prog: revived $name at $(date +%H:%M:%S): links up, slurmd registered, $(node_state "$name")"
}

# --- Faults of a live node or of the controller (docs/development/cluster.md, "Faults") --------
# fault NODES fabric-down: the fabric links of every node in NODES (comma-separated) go down on
#   the bridge side, as a dead InfiniBand port or cable: the node keeps its management network,
#   slurmd, its job's processes; peers on the fabric hear silence (no RST: the node's kernel
#   never sees their packets). fabric-up brings them back.
# fault NODES flap SECONDS: fabric down on all of NODES at once, up again after SECONDS; returns
#   when they are up (the lock is let go meanwhile, so kill-node, status, up, down still run).
# fault controller-stop SECONDS: slurmctld gets SIGSTOP, SIGCONT after SECONDS (a controller
#   that does not answer: RPCs wait for MessageTimeout=$message_timeout s and fail).
# Each fault is recorded in $state/faults/NODE (or .../controller) as "KIND EPOCH [PID]" (PID:
# the cluster.sh that undoes it when its SECONDS are over); `status` lists them; `up`, `down`,
# kill-node and revive-node clear them (a flap or stop whose record went away undoes nothing).

fault_usage="usage: $0 fault NODE[,NODE...] fabric-down|fabric-up|flap SECONDS | $0 fault controller-stop SECONDS"

seconds_arg() {  # seconds_arg VALUE: VALUE if it is a number of seconds in (0, 3600]
    if [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN { exit !($1 > 0 && $1 <= 3600) }"; then
        echo "$1"
    else
        die "SECONDS must be a number in (0, 3600], got '$1': $fault_usage"
    fi
}

fault_nodes() {  # fault_nodes NODES: "NAME SITE K" for each comma-separated node, or fail
    local name site_k
    [[ "$1" =~ ^[^,]+(,[^,]+)*$ ]] || die "NODE list must be names joined by commas, got '$1'"
    for name in ${1//,/ }; do
        site_k=$(node_site_k "$name") || exit 1
        [ -e "/run/netns/$name" ] || die "node $name has no network namespace: run '$0 up' first"
        if [ -e "$state/killed/$name" ] && ! pid_alive "$state/slurmd-$name.pid" slurmd; then
            die "node $name is killed (both networks down): $0 revive-node $name"
        fi
        # shellcheck disable=SC2086  # "SITE K": two words
        [ -n "$(site_mgmt_if $site_k)" ] ||
            die "node $name has one network (the fabric is Slurm's too): a fabric fault would be kill-node"
        echo "$name $site_k"
    done
}

fabric_links() {  # fabric_links up|down SITE K: the node's fabric links, bridge side
    local host_if
    for host_if in $(site_fabric_ifs "$2" "$3"); do ip link set "$host_if" "$1"; done
}

fault_record() {  # fault_record NAME: the recorded fault of NAME ("" when none)
    cat "$state/faults/$1" 2>/dev/null || true
}

fabric_down() {  # fabric_down KIND LINES ("NAME SITE K"): links down, recorded as KIND
    local name site k rec
    while read -r name site k; do
        rec=$(fault_record "$name")
        [ -z "$rec" ] || die "fabric of $name is already down (${rec%% *}): $0 fault $name fabric-up"
    done <<<"$2"
    mkdir -p "$state/faults"
    while read -r name site k; do
        fabric_links down "$site" "$k"
        echo "$1 $(date +%s)${3:+ $3}" >"$state/faults/$name"
    done <<<"$2"
}

fabric_up() {  # fabric_up LINES [OWNER]: links up, record gone; with OWNER only where it still holds
    local name site k rec
    while read -r name site k; do
        rec=$(fault_record "$name")
        if [ -n "${2:-}" ] && [ "${rec##* }" != "$2" ]; then continue; fi
        fabric_links up "$site" "$k"
        rm -f "$state/faults/$name"
        echo "$prog: fabric of $name up at $(date +%H:%M:%S)${rec:+ (was ${rec%% *})}"
    done <<<"$1"
}

fault_wait() {  # fault_wait SECONDS: sleep, interruptible (bash runs a trap only between
    # commands: a foreground sleep would delay ^C's undoing by up to SECONDS); without the lock's
    # descriptor, which a sleep left behind would otherwise keep locked
    sleep "$1" 9>&- &
    wait "$!"
}

relock() {  # take the cluster lock again after a fault's wait
    flock -w 300 9 || die "another cluster.sh held /run/torchrun-jsc-cluster.lock for 300 s"
}

cmd_fault() {  # fault NODES fabric-down|fabric-up|flap SECONDS | fault controller-stop SECONDS
    local secs names
    [ $# -ge 1 ] || die "$fault_usage"
    [ -s "$state/nodes" ] || die "cluster is not up"
    if [ "$1" = controller-stop ]; then
        [ $# -eq 2 ] || die "$fault_usage"
        secs=$(seconds_arg "$2") || exit 1  # (a failed $() as an argument would not stop us)
        controller_stop "$secs"
        return
    fi
    [ $# -ge 2 ] || die "$fault_usage"
    case $2 in
        fabric-down|fabric-up) [ $# -eq 2 ] || die "$fault_usage" ;;
        flap) [ $# -eq 3 ] || die "$fault_usage"; secs=$(seconds_arg "$3") ;;
        *) die "unknown fault '$2': $fault_usage" ;;
    esac
    fault_lines=$(fault_nodes "$1") || exit 1  # global: the EXIT trap reads it
    names=$(cut -d' ' -f1 <<<"$fault_lines" | paste -sd, -)
    case $2 in
        fabric-down)
            fabric_down fabric-down "$fault_lines"
            echo "$prog: fabric of $names down at $(date +%H:%M:%S); management network," \
                 "slurmd and processes live; back with: $0 fault $names fabric-up" ;;
        fabric-up) fabric_up "$fault_lines" ;;
        flap)
            fabric_down flap "$fault_lines" "$$"
            # undone however this ends (a caller's timeout, ^C; not SIGKILL: then `up` undoes
            # it), unless someone else did meanwhile
            trap 'fabric_up "$fault_lines" "$$" >/dev/null 2>&1 || true' EXIT
            trap 'exit 130' INT TERM
            echo "$prog: fabric of $names down at $(date +%H:%M:%S) for $secs s"
            flock -u 9
            fault_wait "$secs"
            relock
            fabric_up "$fault_lines" "$$"
            trap - EXIT ;;
    esac
}

controller_stop() {  # controller_stop SECONDS: slurmctld stopped, continued after SECONDS
    local pid rec
    pid_alive "$state/slurmctld.pid" slurmctld || die "slurmctld is not running"
    rec=$(fault_record controller)
    [ -z "$rec" ] || die "slurmctld is already stopped (${rec%% *}): wait, or run $0 up"
    pid=$(cat "$state/slurmctld.pid")
    mkdir -p "$state/faults"
    echo "controller-stop $(date +%s) $$" >"$state/faults/controller"
    trap 'controller_cont "$$" >/dev/null 2>&1 || true' EXIT
    trap 'exit 130' INT TERM
    kill -STOP "$pid"
    echo "$prog: slurmctld stopped at $(date +%H:%M:%S) for $1 s"
    flock -u 9
    fault_wait "$1"
    relock
    controller_cont "$$"
    trap - EXIT
}

controller_cont() {  # controller_cont [OWNER]: SIGCONT slurmctld if stopped (by OWNER, if given)
    local rec
    rec=$(fault_record controller)
    [ -n "$rec" ] || return 0
    if [ -n "${1:-}" ] && [ "${rec##* }" != "$1" ]; then return 0; fi
    if pid_alive "$state/slurmctld.pid" slurmctld; then kill -CONT "$(cat "$state/slurmctld.pid")"; fi
    rm -f "$state/faults/controller"
    echo "$prog: slurmctld continued at $(date +%H:%M:%S)"
}

clear_faults() {  # every recorded fault undone: slurmctld continued, records gone (links: callers)
    controller_cont >/dev/null
    rm -rf "$state/faults"
}

show_faults() {  # one line per killed node and recorded fault
    local f rec kind when
    for f in "$state"/killed/*; do
        [ -e "$f" ] || continue
        echo "$prog: killed: ${f##*/} since $(date -d "@$(cat "$f")" +%H:%M:%S)"
    done
    for f in "$state"/faults/*; do
        [ -e "$f" ] || continue
        rec=$(cat "$f")
        read -r kind when _ <<<"$rec"
        echo "$prog: fault: ${f##*/} $kind since $(date -d "@$when" +%H:%M:%S)"
    done
}

usage="usage: $0 up [N] | down | status | kill-node NODE | revive-node NODE |"
usage+=" fault NODE[,NODE...] fabric-down|fabric-up|flap SECONDS | fault controller-stop SECONDS"
[ $# -ge 1 ] || die "$usage"
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces, slurmd); rerun with sudo"
# One cluster operation at a time (a test session and `make demo` may race). Every daemon is
# started with fd 9 closed: one that inherited it would hold the lock for as long as it runs.
exec 9>/run/torchrun-jsc-cluster.lock
flock -w 300 9 || die "another cluster.sh holds /run/torchrun-jsc-cluster.lock"
case $1 in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    kill-node) shift; cmd_kill_node "$@" ;;
    revive-node) shift; cmd_revive_node "$@" ;;
    fault) shift; cmd_fault "$@" ;;
    *) die "unknown command '$1': $usage" ;;
esac
