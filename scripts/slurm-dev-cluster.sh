#!/usr/bin/env bash
# A local multi-node Slurm 22.05 cluster on this one machine, for developing and testing gpuhub's Slurm
# engine (and for CI: a Debian 12 container running as root, without systemd).
#
#   scripts/slurm-dev-cluster.sh start          install what is missing, start (or repair) the cluster
#   scripts/slurm-dev-cluster.sh status         each daemon and namespace, then sinfo; exit 0 only when all up
#   scripts/slurm-dev-cluster.sh stop [--purge] undo everything start made (--purge: the directory too)
#   scripts/slurm-dev-cluster.sh bundle IMAGE [NAME]
#                                               an OCI bundle <dir>/bundles/NAME from a local Docker image
#
# What it builds
# --------------
#  * apt packages when missing: slurmctld, slurmd, slurm-client, munge, crun, runc, skopeo, umoci, jq,
#    iproute2, tini (its static build is gpuhub's init in containers), and for accounting slurmdbd +
#    mariadb-server. Package scripts are kept from starting
#    daemons (policy-rc.d) while they install; every daemon here is started directly, never by systemd.
#  * munged (the host's, key /etc/munge/munge.key, socket /run/munge), started as user munge when not
#    already running; stop only stops it when start started it.
#  * Network, all on this machine (nothing routes off it: the namespaces have no default route):
#
#      root network namespace                      network namespace gpuhub-slurm-n1
#     +------------------------------------+       +-----------------------------------+
#     | slurmctld 10.250.77.1:6817         |       | eth0 10.250.77.11, lo             |
#     | slurmdbd  10.250.77.1:6819         |  veth | slurmd -N node1 (hostname node1)  |
#     | bridge gpuhub-slurm0 10.250.77.1/24+-------+ jobs, slurmstepd, containers      |
#     |   gpuhub-n1, gpuhub-n2 (veth ends) |       +-----------------------------------+
#     | mariadbd: unix socket only         |       network namespace gpuhub-slurm-n2
#     | gpuhub's server, sbatch, squeue,   |  veth +-----------------------------------+
#     | sacct ... run here                 +-------+ eth0 10.250.77.12: slurmd node2   |
#     +------------------------------------+       +-----------------------------------+
#
#    Each node is a network namespace (veth onto the bridge, loopback up) plus a mount and UTS
#    namespace of its own (hostname nodeN, /etc/hosts naming the cluster); slurmd enters the network
#    namespace with `nsenter --net` rather than `ip netns exec`, which remounts /sys and so loses the
#    cgroup mounts the OCI runtimes need. Otherwise nodes share the machine: one file system, one user
#    database, the same CPUs, and one process table (`ps` in a job shows every node's processes).
#    slurmctld and slurmdbd run in the root network namespace but in a mount and UTS namespace named
#    gpuhub-ctl, a name that resolves to the bridge address, so CommunicationParameters=NoCtldInAddrAny
#    (slurmctld) and NoInAddrAny (slurmdbd) make them listen on 10.250.77.1 only, not on every
#    interface. When bridged traffic goes through iptables (br_netfilter, as Docker sets it up, with
#    FORWARD policy DROP) an ACCEPT rule for traffic between the bridge's own ports is added, and
#    removed by stop. Daemons start with a clean environment.
#  * A directory of its own, $GPUHUB_SLURM_DIR (default /var/lib/gpuhub-slurm-dev); nothing under
#    /etc/slurm is read or written. Every Slurm command needs SLURM_CONF=<dir>/slurm.conf.
#        slurm.conf gres.conf cgroup.conf oci.conf plugstack.conf slurmdbd.conf hosts
#        bin/oci-run          the OCI runtime wrapper that oci.conf calls (see write_oci_wrapper)
#        bin/task-prolog      TaskProlog: gives every task SLURM_CONF (srun inside jobs needs it)
#        dev/nodeN/nvidia0,1  fake GPUs: character devices 195:0 and 195:1, like NVIDIA's
#        state/ctld state/nodeN   StateSaveLocation and each slurmd's SlurmdSpoolDir (%n)
#        log/  run/ (pid files, mariadb socket, run/oci: the OCI runtime's state, mode 1777)
#        mysql/               MariaDB's data directory (its own instance, no TCP port)
#        images/ bundles/     OCI image layout and unpacked bundles (bundles/busybox from gpuhub/busybox);
#                             gpuhub's Slurm engine keeps its own under bundles/images and bundles/runs
#        gpuhub-logs/         gpuhub's members' output, <account>/job-<id>.m<i>.log (its log_dir)
#  * Slurm: one partition "gpu" (default) with nodes node1..nodeN (GPUHUB_SLURM_NODES, default 2), each
#    CPUs=4, RealMemory=4000 (declared, not detected: SlurmdParameters=config_overrides, so a 2-core CI
#    machine can run it; CPUs are oversubscribed), Gres=gpu:fake:2,shard:fake:8 (4 shards per GPU:
#    `--gres=shard:2` jobs share a GPU two by two). select/cons_tres with CR_Core_Memory,
#    DefMemPerCPU=250, proctrack/linuxproc, task/none: no cgroups, nothing confined.
#    Accounting (GPUHUB_SLURM_ACCOUNTING=slurmdbd, the default): slurmdbd on a private MariaDB, so
#    `sacct` keeps finished jobs for good (their exit codes: `sacct -P -o ExitCode`; 22.05's
#    `sacct --json` reports every normal exit as 0), and `squeue --json`/`scontrol show job` show them
#    for MinJobAge=1h. With =none there is no slurmdbd and MinJobAge is 1 day.
#  * OCI containers (`srun/sbatch --container=<bundle>`): oci.conf runs crun (GPUHUB_SLURM_OCI_RUNTIME,
#    or runc) rootless, as the job's user, through bin/oci-run, which maps the job's UID/GID onto
#    themselves in the container's user namespace (crun; runc needs root mapped, so with runc the job
#    is UID 0 inside, the user outside), and gives the container the GPU variables and /dev/nvidiaN of
#    the job's GPUs, which Slurm 22.05 leaves out. Bundles made by `bundle` share the node's network and
#    hostname, have a read-only root and a private tmpfs /tmp. A shell in a running container (the
#    container id is <node>.<user>.<job>.<step>.<task>; run it as the job's user):
#      srun --jobid=J --overlap -w node2 --pty crun --rootless=true --root=<dir>/run/oci \
#           exec -t --user UID:GID node2.alice.J.0.0 sh
#    On nodes where cgroup v2 is mounted next to v1 with a controller in it ("hybrid", as in this
#    sandbox, where hugetlb sits on cgroup2) crun refuses to run ("cgroups in hybrid mode not
#    supported"), so each node's mount namespace hides /sys/fs/cgroup/unified (the host's mounts are
#    untouched) and the node looks like a plain cgroup v1 machine.
#
# Bundles and shared storage: a bundle must be readable at the same path on every node. Here the nodes
# share this machine's file system. On a real cluster point GPUHUB_SLURM_DIR's bundles/ (or gpuhub's
# bundle_dir) at an NFS (or other shared) export mounted at the same path on the login and every compute
# node, e.g. `mount -t nfs fileserver:/export/gpuhub-bundles /var/lib/gpuhub-slurm-dev/bundles`, readable
# (not writable) by the job users; the runtime's state (run/oci) must stay node-local.
#
# Needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN (a CI container must be --privileged): it creates
# network namespaces, a bridge, mount and UTS namespaces and device nodes.
#
# Environment: GPUHUB_SLURM_DIR, GPUHUB_SLURM_NODES (1-9), GPUHUB_SLURM_NET (first three octets of a free
# /24, default 10.250.77), GPUHUB_SLURM_SHARDS_PER_GPU (default 4), GPUHUB_SLURM_ACCOUNTING
# (slurmdbd|none), GPUHUB_SLURM_OCI_RUNTIME (crun|runc), GPUHUB_BUSYBOX_IMAGE (gpuhub/busybox:latest).
set -euo pipefail

for d in /usr/local/sbin /usr/sbin /sbin; do
    case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"

DIR="${GPUHUB_SLURM_DIR:-/var/lib/gpuhub-slurm-dev}"
NODES="${GPUHUB_SLURM_NODES:-2}"
NET="${GPUHUB_SLURM_NET:-10.250.77}"
ACCOUNTING="${GPUHUB_SLURM_ACCOUNTING:-slurmdbd}"
OCI_RUNTIME="${GPUHUB_SLURM_OCI_RUNTIME:-crun}"
IMAGE="${GPUHUB_BUSYBOX_IMAGE:-gpuhub/busybox:latest}"

BRIDGE=gpuhub-slurm0
NS_PREFIX=gpuhub-slurm-n     # network namespaces gpuhub-slurm-n1, -n2, ...
VETH_PREFIX=gpuhub-n         # host ends of the veth pairs: gpuhub-n1, gpuhub-n2, ... (eth0 inside)
CTL_HOST=gpuhub-ctl          # UTS name of slurmctld/slurmdbd; resolves to the bridge address
CTL_ADDR="$NET.1"
CLUSTER=gpuhub-dev
PARTITION=gpu
GPUS_PER_NODE=2
SHARDS_PER_GPU="${GPUHUB_SLURM_SHARDS_PER_GPU:-4}"
CPUS_PER_NODE=4
MEM_PER_NODE=4000
FW_COMMENT=gpuhub-slurm-dev
MARKER="$DIR/.gpuhub-slurm-dev"   # proves $DIR is ours before stop --purge deletes it
export SLURM_CONF="$DIR/slurm.conf"

log() { printf '==> %s\n' "$*"; }
warn() { printf 'slurm-dev-cluster: warning: %s\n' "$*" >&2; }
die() { printf 'slurm-dev-cluster: %s\n' "$*" >&2; exit 1; }

node_addr() { echo "$NET.$((10 + $1))"; }

# --- checks ----------------------------------------------------------------------------------------

check_settings() {
    [[ "$NODES" =~ ^[1-9]$ ]] || die "GPUHUB_SLURM_NODES must be 1-9, not '$NODES'"
    [[ "$NET" =~ ^10\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -le 255 ] &&
        [ "${BASH_REMATCH[2]}" -le 255 ] ||
        die "GPUHUB_SLURM_NET must be the first three octets of a 10.x.y.0/24, not '$NET'"
    case "$ACCOUNTING" in slurmdbd | none) ;; *) die "GPUHUB_SLURM_ACCOUNTING must be slurmdbd or none" ;; esac
    case "$OCI_RUNTIME" in crun | runc) ;; *) die "GPUHUB_SLURM_OCI_RUNTIME must be crun or runc" ;; esac
    [[ "$SHARDS_PER_GPU" =~ ^[1-9][0-9]?$ ]] || die "GPUHUB_SLURM_SHARDS_PER_GPU must be 1-99, not '$SHARDS_PER_GPU'"
    case "$DIR" in /*) ;; *) die "GPUHUB_SLURM_DIR must be an absolute path, not '$DIR'" ;; esac
    case "$DIR" in *[[:space:]]* | *[\'\"\\%]*) die "GPUHUB_SLURM_DIR must not contain spaces, quotes or %" ;; esac
}

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root (it creates network namespaces and starts daemons)"; }

# pid_of FILE COMM: the pid in FILE when that process is alive and named COMM, else nothing (rc 1).
pid_of() {
    local pid
    [ -s "$1" ] || return 1
    pid="$(tr -dc 0-9 <"$1")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
    echo "$pid"
}

# stop_pid PID [SECONDS]: SIGTERM, wait, then SIGKILL.
stop_pid() {
    local pid=$1 wait=${2:-15} i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < wait * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    warn "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) ignored SIGTERM for ${wait}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

# write_file PATH MODE: stdin to PATH when the content differs; rc 0 when it changed, 1 when not.
write_file() {
    local tmp
    tmp="$(mktemp "$1.XXXXXX")"
    cat >"$tmp"
    chmod "$2" "$tmp"
    if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
        rm -f "$tmp"
        return 1
    fi
    mv -f "$tmp" "$1"
}

# --- 1. packages -----------------------------------------------------------------------------------

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

ensure_packages() {
    local pkgs=(slurmctld slurmd slurm-client munge crun runc skopeo umoci jq iproute2 util-linux tini)
    [ "$ACCOUNTING" = slurmdbd ] && pkgs+=(slurmdbd mariadb-server)
    local missing=() p
    for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "packages: all present"
        return
    fi
    command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get: this script is for Debian 12"
    log "apt-get install ${missing[*]}"
    # Keep the packages' maintainer scripts from starting mariadb, munge or slurm through init scripts:
    # this script starts its own instances. A policy-rc.d that is already there is left alone.
    local policy=/usr/sbin/policy-rc.d ours=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        ours=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    local rc=0
    {
        apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confdef \
            -o Dpkg::Options::=--force-confold "${missing[@]}" ||
            { apt-get update && apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confdef \
                -o Dpkg::Options::=--force-confold "${missing[@]}"; }
    } || rc=$?
    [ "$ours" = 1 ] && rm -f "$policy"
    [ "$rc" = 0 ] || die "apt-get install ${missing[*]} failed"
    for p in "${missing[@]}"; do installed "$p" || die "package $p did not install"; done
}

# --- 2. munge --------------------------------------------------------------------------------------

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
    if munge_works; then
        log "munged: running"
        return
    fi
    id munge >/dev/null 2>&1 || die "there is no user munge (is the munge package installed?)"
    install -d -o munge -g munge -m 0700 /etc/munge
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge
    install -d -o munge -g munge -m 0711 /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        log "munge: creating /etc/munge/munge.key"
        if command -v mungekey >/dev/null; then
            runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
        else
            create-munge-key -f
        fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0600 /etc/munge/munge.key
    # A stale socket or pid file from a munged that died makes the new one refuse to start.
    if ! pid_of /run/munge/munged.pid munged >/dev/null; then
        rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
    fi
    log "munged: starting"
    runuser -u munge -- munged || die "munged did not start (see /var/log/munge/munged.log)"
    local i
    for ((i = 0; i < 50; i++)); do munge_works && break; sleep 0.1; done
    munge_works || die "munged started but munge -n | unmunge fails (see /var/log/munge/munged.log)"
    cat /run/munge/munged.pid >"$DIR/run/munged.ours"
    CHANGED=1
}

# --- 3. network ------------------------------------------------------------------------------------

bridge_nf_on() { [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)" = 1 ]; }
fw_rule() { iptables "$1" FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$FW_COMMENT" -j ACCEPT; }

ensure_network() {
    local did=0
    # The /24 must be ours: refuse one that another interface (Docker's networks, say) already routes.
    local other
    other="$({ ip -o -4 route show match "$NET.0/24"; ip -o -4 route show root "$NET.0/24"; } |
        grep -v -e '^default ' -e "dev $BRIDGE " || true)"
    [ -z "$other" ] || die "$NET.0/24 is already routed elsewhere ($other); pick another GPUHUB_SLURM_NET"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        did=1
    fi
    if ! ip -o -4 addr show dev "$BRIDGE" | grep -q " $CTL_ADDR/24 "; then
        ip addr add "$CTL_ADDR/24" dev "$BRIDGE"
        did=1
    fi
    ip link set "$BRIDGE" up
    if bridge_nf_on && command -v iptables >/dev/null; then
        if ! fw_rule -C 2>/dev/null; then
            fw_rule -I
            did=1
        fi
    fi
    local n ns veth addr
    for ((n = 1; n <= NODES; n++)); do
        ns="$NS_PREFIX$n" veth="$VETH_PREFIX$n" addr="$(node_addr "$n")"
        if [ ! -e "/run/netns/$ns" ]; then
            ip netns add "$ns"
            did=1
        fi
        ip -n "$ns" link set lo up
        if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
            ip link del "$veth" 2>/dev/null || true
            ip link add "$veth" type veth peer name eth0 netns "$ns"
            did=1
        fi
        ip link set "$veth" master "$BRIDGE" up
        if ! ip -n "$ns" -o -4 addr show dev eth0 | grep -q " $addr/24 "; then
            ip -n "$ns" addr flush dev eth0
            ip -n "$ns" addr add "$addr/24" dev eth0
            did=1
        fi
        ip -n "$ns" link set eth0 up
    done
    if [ "$did" = 1 ]; then
        log "network: bridge $BRIDGE $CTL_ADDR/24, namespaces $NS_PREFIX[1-$NODES] (set up)"
        CHANGED=1
    else
        log "network: bridge $BRIDGE $CTL_ADDR/24, namespaces $NS_PREFIX[1-$NODES]"
    fi
}

# --- 4. configuration ------------------------------------------------------------------------------

make_dirs() {
    install -d -m 0755 "$DIR" "$DIR/bin" "$DIR/log" "$DIR/run" "$DIR/state" "$DIR/state/ctld" \
        "$DIR/images" "$DIR/bundles" "$DIR/dev" "$DIR/gpuhub-logs"
    [ -e "$MARKER" ] || echo "made by scripts/slurm-dev-cluster.sh; stop --purge deletes this directory" >"$MARKER"
    # The OCI runtime's state: every job user creates a directory here, so it is world-writable+sticky.
    install -d -m 1777 "$DIR/run/oci"
    local n
    for ((n = 1; n <= NODES; n++)); do
        # The spool must be traversable by job users: a --container step's bundle is written under it.
        install -d -m 0755 "$DIR/state/node$n" "$DIR/dev/node$n"
        local g
        for ((g = 0; g < GPUS_PER_NODE; g++)); do
            local f="$DIR/dev/node$n/nvidia$g"
            if [ ! -c "$f" ]; then
                rm -f "$f"
                mknod -m 0666 "$f" c 195 "$g"
            fi
        done
    done
}

write_configs() {
    local changed=0 n g
    {
        echo "# Written by scripts/slurm-dev-cluster.sh; rewritten on every start."
        echo "ClusterName=$CLUSTER"
        echo "SlurmctldHost=$CTL_HOST($CTL_ADDR)"
        echo "SlurmUser=root"
        echo "AuthType=auth/munge"
        echo "CommunicationParameters=NoCtldInAddrAny"
        echo "StateSaveLocation=$DIR/state/ctld"
        echo "SlurmdSpoolDir=$DIR/state/%n"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "PlugStackConfig=$DIR/plugstack.conf"
        echo "MailProg=/bin/true"
        echo "# Gives every task SLURM_CONF, so srun in a job finds this cluster even with --export=NONE."
        echo "TaskProlog=$DIR/bin/task-prolog"
        echo "# No cgroups: processes are tracked by parent pid; nothing is confined."
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/linux"
        echo "JobAcctGatherFrequency=30"
        echo "MpiDefault=none"
        echo "SwitchType=switch/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core_Memory"
        echo "DefMemPerCPU=250"
        echo "# Declared node sizes win over what slurmd detects (a 2-core machine runs 4-CPU nodes)."
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        # Tests add accounts and team groups as they go: a job's groups are looked up afresh each time
        # (Slurm caches a user's groups for GroupUpdateTime, 600s by default).
        echo "GroupUpdateTime=0"
        # Finished jobs, with their exit codes, stay in squeue/scontrol for MinJobAge. `squeue --json`
        # returns every job slurmctld holds (22.05 ignores -j/-u/-t with --json), so keep it short
        # when sacct has them anyway.
        if [ "$ACCOUNTING" = slurmdbd ]; then echo "MinJobAge=3600"; else echo "MinJobAge=86400"; fi
        echo "KillWait=10"
        echo "InactiveLimit=0"
        echo "# Backfill every 5s instead of 30s: jobs queued behind a blocked one start sooner in tests."
        echo "SchedulerParameters=bf_interval=5"
        echo "SlurmdTimeout=120"
        echo "GresTypes=gpu,shard"
        if [ "$ACCOUNTING" = slurmdbd ]; then
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=$CTL_ADDR"
            echo "AccountingStoragePort=6819"
            echo "AccountingStorageTRES=gres/gpu,gres/shard"
            echo "AccountingStoreFlags=job_comment"
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        echo "JobCompType=jobcomp/none"
        for ((n = 1; n <= NODES; n++)); do
            echo "NodeName=node$n NodeAddr=$(node_addr "$n") NodeHostname=node$n CPUs=$CPUS_PER_NODE" \
                "Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS_PER_NODE ThreadsPerCore=1" \
                "RealMemory=$MEM_PER_NODE Gres=gpu:fake:$GPUS_PER_NODE,shard:$((GPUS_PER_NODE * SHARDS_PER_GPU))" \
                "State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    } | write_file "$DIR/slurm.conf" 0644 && changed=1

    {
        echo "# Fake GPUs: character devices 195:N like /dev/nvidiaN (slurmd drops GPUs without a File)."
        echo "AutoDetect=off"
        for ((n = 1; n <= NODES; n++)); do
            echo "NodeName=node$n Name=gpu Type=fake File=$DIR/dev/node$n/nvidia[0-$((GPUS_PER_NODE - 1))]"
            for ((g = 0; g < GPUS_PER_NODE; g++)); do
                echo "NodeName=node$n Name=shard Count=$SHARDS_PER_GPU File=$DIR/dev/node$n/nvidia$g"
            done
        done
    } | write_file "$DIR/gres.conf" 0644 && changed=1

    {
        echo "# No cgroup confinement (proctrack/linuxproc, task/none); autodetect whatever the node has."
        echo "CgroupPlugin=autodetect"
        echo "CgroupAutomount=no"
    } | write_file "$DIR/cgroup.conf" 0644 && changed=1

    echo "# No SPANK plugins (keeps /etc/slurm/plugstack.conf out of this cluster)." |
        write_file "$DIR/plugstack.conf" 0644 && changed=1

    {
        echo "127.0.0.1 localhost"
        echo "$CTL_ADDR $CTL_HOST"
        for ((n = 1; n <= NODES; n++)); do echo "$(node_addr "$n") node$n"; done
    } | write_file "$DIR/hosts" 0644 && changed=1

    # --container: the runtime runs as the job's user. %n.%u.%j.%s.%t is unique per node, job, step
    # and task; run/oci is each node's runtime state (all nodes share it here; ids carry the node).
    # slurmstepd runs each pattern with /bin/sh -c. RunTimeRun must `exec`: the runtime has to be the
    # task itself, or scancel kills only the shell, the orphaned runtime keeps the step's output open
    # and the job hangs in COMPLETING. RunTimeKill only runs once the task has ended (leftovers).
    local rt="$OCI_RUNTIME --rootless=true --root=$DIR/run/oci"
    {
        echo "# Written by scripts/slurm-dev-cluster.sh. Containers run rootless as the job's user."
        echo "RunTimeQuery=\"$DIR/bin/oci-run state %n.%u.%j.%s.%t\""
        echo "RunTimeKill=\"$rt kill -a %n.%u.%j.%s.%t SIGKILL\""
        echo "RunTimeDelete=\"$rt delete --force %n.%u.%j.%s.%t\""
        echo "RunTimeRun=\"exec $DIR/bin/oci-run run %b %n.%u.%j.%s.%t\""
    } | write_file "$DIR/oci.conf" 0644 || true
    # oci.conf and the wrapper are read per step by slurmstepd: no restart for them.
    write_oci_wrapper || true
    printf '#!/bin/sh\n# Written by scripts/slurm-dev-cluster.sh: slurm.conf TaskProlog.\necho "export SLURM_CONF=%s"\n' \
        "$SLURM_CONF" | write_file "$DIR/bin/task-prolog" 0755 || true

    if [ "$ACCOUNTING" = slurmdbd ]; then
        {
            echo "# Written by scripts/slurm-dev-cluster.sh."
            echo "AuthType=auth/munge"
            echo "DbdHost=$CTL_HOST"
            echo "DbdAddr=$CTL_ADDR"
            echo "DbdPort=6819"
            echo "CommunicationParameters=NoInAddrAny"
            echo "SlurmUser=root"
            echo "DebugLevel=info"
            echo "LogFile=$DIR/log/slurmdbd.log"
            echo "PidFile=$DIR/run/slurmdbd.pid"
            echo "StorageType=accounting_storage/mysql"
            echo "# MariaDB's unix socket (MYSQL_UNIX_PORT in slurmdbd's environment); root by socket auth."
            echo "StorageHost=localhost"
            echo "StorageUser=root"
            echo "StorageLoc=slurm_acct_db"
        } | write_file "$DIR/slurmdbd.conf" 0600 && changed=1
    else
        rm -f "$DIR/slurmdbd.conf"
    fi
    CONFIG_CHANGED=$changed
}

# bin/oci-run state ID: the runtime's state of container ID, or {"status": "stopped"} once the runtime
# has forgotten it (slurmstepd queries after `run` returned; the runtime's error text would otherwise
# land in the job's output as "_try_parse: JSON parsing error").
#
# bin/oci-run run BUNDLE ID: what slurmstepd runs for a --container step, as the job's user, with slurmd's
# environment (not the task's). BUNDLE is the step's copy of the bundle (config.json rewritten by
# Slurm, root pointing at the original rootfs) in a directory that belongs to the user, so the wrapper
# can replace config.json; ID is node.user.job.step.task (oci.conf's %n.%u.%j.%s.%t).
#
# Slurm 22.05 writes the container's environment before it adds the step's GPU and per-task variables
# (slurmstepd calls setup_container() before gres_g_step_set_env(), and the task's environment never
# reaches the runtime), so a container would see no CUDA_VISIBLE_DEVICES at all. The wrapper asks
# slurmctld for the job's GPUs on this node (`scontrol show job -d`: GRES=...(IDX:...)) and adds
# CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, NVIDIA_VISIBLE_DEVICES, SLURM_JOB_GPUS/SLURM_STEP_GPUS,
# SLURM_GPUS_ON_NODE, SLURM_SHARDS_ON_NODE, SLURMD_NODENAME, SLURM_NODEID, SLURM_PROCID and
# SLURM_LOCALID (22.05 runs one container task per node), and bind-mounts exactly those GPUs' device
# files at /dev/nvidiaN (what NVIDIA's container hook does on a real node). Limitation: it sees the
# job's GPUs on the node, so a step asking for fewer GPUs than its job holds there is shown all of them.
write_oci_wrapper() {
    sed -e "s|@DIR@|$DIR|g" -e "s|@RUNTIME@|$OCI_RUNTIME|g" <<'EOF' | write_file "$DIR/bin/oci-run" 0755
#!/bin/bash
# Written by scripts/slurm-dev-cluster.sh: oci.conf's RunTimeRun, run as the job's user.
set -euo pipefail
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export SLURM_CONF=@DIR@/slurm.conf
case "${1:-}" in
    state)
        @RUNTIME@ --rootless=true --root=@DIR@/run/oci state "$2" 2>/dev/null || echo '{"status": "stopped"}'
        exit 0 ;;
    run) shift ;;
    *) echo "usage: oci-run state ID | run BUNDLE ID" >&2; exit 2 ;;
esac
bundle="$1" id="$2"
task="${id##*.}" rest="${id%.*}"
step="${rest##*.}" rest="${rest%.*}"
job="${rest##*.}" node="${id%%.*}"
uid="$(id -u)" gid="$(id -g)"
cfg="$bundle/config.json" tmp="$bundle/.config.json.$$"

expand() { # "0-1,3" -> "0,1,3"
    local part out=()
    for part in ${1//,/ }; do
        case "$part" in *-*) out+=($(seq "${part%-*}" "${part#*-}")) ;; *) out+=("$part") ;; esac
    done
    local IFS=,
    echo "${out[*]}"
}

# The job's GRES on this node, from lines like "Nodes=node[1-2] CPU_IDs=0 Mem=250 GRES=gpu:fake:1(IDX:0)".
gres=""
if detail="$(scontrol show job -d "$job" 2>/dev/null)"; then
    while read -r nodes g; do
        if scontrol show hostnames "$nodes" | grep -qx "$node"; then gres="$g"; fi
    done < <(sed -n 's/^ *Nodes=\([^ ]*\) .*GRES=\([^ ]*\).*/\1 \2/p' <<<"$detail")
else
    echo "oci-run: scontrol show job $job failed: the container gets no GPU variables" >&2
fi
idx=""
for list in $(grep -o 'IDX:[^)]*' <<<"$gres" | cut -d: -f2); do
    idx="${idx:+$idx,}$(expand "$list")"
done
idx="$(tr , '\n' <<<"$idx" | grep -E '^[0-9]+$' | sort -nu | paste -sd, -)" || true
shards="$(grep -o 'shard:\([^:(]*:\)\?[0-9]\+' <<<"$gres" | grep -o '[0-9]\+$' | head -n1)" || true

# Task identity: one task per node, so the node's place in the step's node list is its rank.
nodeid=0
if [ "$step" != 4294967291 ] && [ "$step" != 4294967290 ]; then # not the batch or interactive step
    list="$(jq -r '.process.env[] | select(startswith("SLURM_STEP_NODELIST=")) | sub("^[^=]*="; "")' "$cfg")"
    if [ -n "$list" ]; then
        nodeid="$(scontrol show hostnames "$list" | grep -nx "$node" | cut -d: -f1)"
        nodeid=$((${nodeid:-1} - 1))
    fi
    gpuvar=SLURM_STEP_GPUS
else
    gpuvar=SLURM_JOB_GPUS
fi
add="$(jq -n --arg node "$node" --arg task "$task" --arg nodeid "$nodeid" --arg idx "$idx" \
    --arg shards "$shards" --arg gpuvar "$gpuvar" '
    {SLURMD_NODENAME: $node, SLURM_LOCALID: $task, SLURM_NODEID: $nodeid, SLURM_PROCID: $nodeid}
    + (if $idx == "" then {} else
        {CUDA_VISIBLE_DEVICES: $idx, GPU_DEVICE_ORDINAL: $idx, NVIDIA_VISIBLE_DEVICES: $idx,
         SLURM_GPUS_ON_NODE: ($idx | split(",") | length | tostring)} + {($gpuvar): $idx} end)
    + (if $shards == "" then {} else {SLURM_SHARDS_ON_NODE: $shards} end)')"

if [ "@RUNTIME@" = crun ]; then
    # The user is itself in the container (its UID/GID mapped onto themselves), as with docker --user.
    user='{uid: $uid, gid: $gid}' cmap='$uid' gmap='$gid'
else
    # runc insists on a mapping for root: the user is UID 0 in the container, itself outside.
    user='{uid: 0, gid: 0}' cmap='0' gmap='0'
fi
jq --argjson uid "$uid" --argjson gid "$gid" --argjson add "$add" --arg idx "$idx" \
    --arg devdir "@DIR@/dev/$node" "
    .process.user = $user
    | .linux.uidMappings = [{containerID: $cmap, hostID: \$uid, size: 1}]
    | .linux.gidMappings = [{containerID: $gmap, hostID: \$gid, size: 1}]
    | .process.env = ([.process.env[] | select((split(\"=\")[0]) as \$k | \$add | has(\$k) | not)]
                      + (\$add | to_entries | map(\"\\(.key)=\\(.value)\")))
    | .mounts += [\$idx | split(\",\")[] | select(. != \"\")
                  | {destination: \"/dev/nvidia\\(.)\", type: \"bind\", source: \"\\(\$devdir)/nvidia\\(.)\",
                     options: [\"bind\", \"nosuid\", \"noexec\"]}]
    " "$cfg" >"$tmp"
mv -f "$tmp" "$cfg"
# crun prefers newuidmap/newgidmap where they are installed (Debian's uidmap, which LXD brings): they
# refuse a process whose group is not its account's primary one (a job in a team's group) and say so in
# the job's output. The single mappings above need neither, so crun runs without them on its PATH.
runtime="$(command -v @RUNTIME@)"
PATH=/nonexistent exec "$runtime" --rootless=true --root=@DIR@/run/oci run --bundle "$bundle" "$id"
EOF
}

# --- 5. daemons ------------------------------------------------------------------------------------

# Runs inside a fresh mount and UTS namespace (see in_ctl/in_node): name it, let it resolve the
# cluster's names, and on a node hide a cgroup2 hierarchy that holds controllers next to cgroup v1
# (crun refuses such "hybrid" hosts; with it hidden the node is plain cgroup v1).
enter_namespace() {
    local name=$1 kind=$2
    shift 2
    hostname "$name"
    mount --bind "$DIR/hosts" /etc/hosts
    if [ "$kind" = node ] && [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] &&
        mountpoint -q /sys/fs/cgroup/unified &&
        [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
        umount -l /sys/fs/cgroup/unified
    fi
    exec "$@"
}

# Daemons start with a clean environment (it reaches jobs' helpers such as bin/oci-run), plus any
# NAME=VALUE arguments given before the command.
daemon_env() {
    local e=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
        "SLURM_CONF=$SLURM_CONF" "GPUHUB_SLURM_DIR=$DIR")
    while [ $# -gt 0 ] && [[ "$1" == [A-Z]*=* ]]; do e+=("$1"); shift; done
    DAEMON_ENV=("${e[@]}") DAEMON_CMD=("$@")
}
in_ctl() {
    daemon_env "$@"
    env -i "${DAEMON_ENV[@]}" unshare --mount --uts --propagation slave -- \
        "$SELF" __enter "$CTL_HOST" ctl "${DAEMON_CMD[@]}"
}
in_node() {
    local n=$1
    shift
    daemon_env "$@"
    env -i "${DAEMON_ENV[@]}" nsenter --net="/run/netns/$NS_PREFIX$n" -- \
        unshare --mount --uts --propagation slave -- "$SELF" __enter "node$n" node "${DAEMON_CMD[@]}"
}

mysql_sock() { echo "$DIR/run/mysqld/mysqld.sock"; }
mysql_ping() { mariadb-admin --no-defaults --socket="$(mysql_sock)" -u root ping >/dev/null 2>&1; }

ensure_mariadb() {
    local pid
    if pid="$(pid_of "$DIR/run/mysqld/mysqld.pid" mariadbd)" && mysql_ping; then
        log "mariadbd: running (pid $pid)"
        return
    fi
    [ -n "${pid:-}" ] && stop_pid "$pid" 30
    install -d -o mysql -g mysql -m 0755 "$DIR/run/mysqld"
    touch "$DIR/log/mariadb.log"
    chown mysql:mysql "$DIR/log/mariadb.log"
    if [ ! -d "$DIR/mysql/mysql" ]; then
        log "mariadb: initialising $DIR/mysql"
        rm -rf "$DIR/mysql"
        install -d -o mysql -g mysql -m 0750 "$DIR/mysql"
        mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/mysql" \
            --auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
            >"$DIR/log/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    fi
    log "mariadbd: starting (socket $(mysql_sock), no TCP)"
    rm -f "$(mysql_sock)" "$DIR/run/mysqld/mysqld.pid"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 setsid -f mariadbd --no-defaults --user=mysql --datadir="$DIR/mysql" --socket="$(mysql_sock)" \
        --pid-file="$DIR/run/mysqld/mysqld.pid" --skip-networking --skip-name-resolve \
        --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900 --max-connections=50 </dev/null >/dev/null 2>&1
    local i
    for ((i = 0; i < 300; i++)); do mysql_ping && break; sleep 0.1; done
    mysql_ping || die "mariadbd did not come up in 30s (see $DIR/log/mariadb.log)"
    CHANGED=1
}

slurmdbd_up() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

ensure_slurmdbd() {
    local pid
    if pid="$(pid_of "$DIR/run/slurmdbd.pid" slurmdbd)" && [ "${RESTART_SLURM:-0}" = 0 ]; then
        log "slurmdbd: running (pid $pid)"
        return
    fi
    [ -n "${pid:-}" ] && stop_pid "$pid"
    log "slurmdbd: starting on $CTL_ADDR:6819"
    in_ctl "MYSQL_UNIX_PORT=$(mysql_sock)" slurmdbd || die "slurmdbd failed to start (see $DIR/log/slurmdbd.log)"
    local i
    for ((i = 0; i < 600; i++)); do slurmdbd_up && break; sleep 0.1; done
    slurmdbd_up || die "slurmdbd does not answer after 60s (see $DIR/log/slurmdbd.log)"
    CHANGED=1
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

ensure_slurmctld() {
    local pid
    if pid="$(pid_of "$DIR/run/slurmctld.pid" slurmctld)" && [ "${RESTART_SLURM:-0}" = 0 ]; then
        log "slurmctld: running (pid $pid)"
        return
    fi
    [ -n "${pid:-}" ] && stop_pid "$pid"
    log "slurmctld: starting on $CTL_ADDR:6817"
    in_ctl slurmctld || die "slurmctld failed to start (see $DIR/log/slurmctld.log)"
    local i
    for ((i = 0; i < 300; i++)); do ctld_up && break; sleep 0.1; done
    ctld_up || die "slurmctld does not answer after 30s (see $DIR/log/slurmctld.log)"
    CHANGED=1
}

# slurmd_pid N: the pid of node N's slurmd, if it runs in the namespace that is now gpuhub-slurm-nN (a
# slurmd left in a namespace that was deleted and made again is unreachable).
slurmd_pid() {
    local pid
    pid="$(pid_of "$DIR/run/slurmd-node$1.pid" slurmd)" || return 1
    if [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" != "$(stat -L -c %i "/run/netns/$NS_PREFIX$1" 2>/dev/null)" ]; then
        echo "$pid"
        return 2
    fi
    echo "$pid"
}

ensure_slurmd() {
    local n=$1 pid rc=0
    pid="$(slurmd_pid "$n")" || rc=$?
    if [ "$rc" = 2 ]; then
        log "slurmd node$n: pid $pid is not in $NS_PREFIX$n any more; restarting it"
        stop_pid "$pid"
        pid=""
    fi
    if [ "$rc" = 0 ] && [ "${RESTART_SLURM:-0}" = 0 ]; then
        log "slurmd node$n: running (pid $pid, $(node_addr "$n"))"
        return
    fi
    [ -n "${pid:-}" ] && stop_pid "$pid"
    log "slurmd node$n: starting in $NS_PREFIX$n ($(node_addr "$n"))"
    in_node "$n" slurmd -N "node$n" || die "slurmd node$n failed to start (see $DIR/log/slurmd-node$n.log)"
    CHANGED=1
}

# Waits until every node is idle/mixed/allocated; resumes nodes left DOWN/DRAIN by an earlier run.
wait_nodes() {
    local i states bad resumed=0 nudged=0
    for ((i = 0; i < 600; i++)); do
        states="$(sinfo -h -N -p "$PARTITION" -o '%N %T' 2>/dev/null | sort -u)"
        bad="$(awk '$2 !~ /^(idle|mixed|allocated|completing)$/ {print $1}' <<<"$states")"
        if [ -n "$states" ] && [ -z "$bad" ] && [ "$(wc -l <<<"$states")" -eq "$NODES" ]; then
            return 0
        fi
        # A slurmd that kept running while slurmctld restarted registers again only when pinged (up to
        # a minute later); a reconfigure makes every slurmd register at once.
        if [ "$nudged" = 0 ] && [ "$i" -gt 30 ]; then
            scontrol reconfigure 2>/dev/null || true
            nudged=1
        fi
        # A node that registered but is down/drained (left so by a crash or an old config): resume once.
        if [ "$resumed" = 0 ] && [ "$i" -gt 20 ] && grep -Eq ' (down|drained|draining|drain)[*]?$' <<<"$states"; then
            local nodes
            nodes="$(awk '$2 ~ /^(down|drained|draining|drain)/ {print $1}' <<<"$states" | paste -sd, -)"
            log "resuming $nodes"
            scontrol update nodename="$nodes" state=resume 2>/dev/null || true
            resumed=1
        fi
        sleep 0.1
    done
    sinfo -N -l >&2 || true
    for ((i = 1; i <= NODES; i++)); do
        echo "--- $DIR/log/slurmd-node$i.log (tail)" >&2
        tail -n 15 "$DIR/log/slurmd-node$i.log" >&2 2>/dev/null || true
    done
    die "nodes did not all become idle within 60s (states: $(tr '\n' ' ' <<<"$states"))"
}

# --- 6. OCI bundles --------------------------------------------------------------------------------

# make_bundle IMAGE NAME: <dir>/bundles/NAME from a local Docker image, via an OCI image layout.
make_bundle() {
    local image=$1 name=$2 bundle="$DIR/bundles/$2" layout="$DIR/images/$2"
    [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "bundle name '$name' must be [A-Za-z0-9_.-]"
    docker image inspect "$image" >/dev/null 2>&1 || die "no local Docker image $image"
    local tmp="$bundle.tmp.$$"
    rm -rf "$tmp" "$layout"
    install -d -m 0755 "$layout"
    skopeo copy --quiet "docker-daemon:$image" "oci:$layout:latest" >/dev/null ||
        die "skopeo copy docker-daemon:$image failed"
    # --rootless: no chown to the image's owners, so an unprivileged runtime can use it as it is.
    umoci unpack --rootless --image "$layout:latest" "$tmp" >/dev/null || die "umoci unpack of $image failed"
    # Slurm runs the container in the node's network and hostname (no net/uts namespaces), with a
    # read-only root and a private /tmp (where Slurm bind-mounts a batch step's script and output).
    # User and UID/GID mappings are set per job by bin/oci-run.
    jq '.process.terminal = false
        | .root.readonly = true
        | .linux.namespaces |= map(select(.type != "network" and .type != "uts"))
        | del(.hostname, .linux.uidMappings, .linux.gidMappings)
        | .mounts |= map(select(.destination != "/tmp"))
        | .mounts += [{destination: "/tmp", type: "tmpfs", source: "tmpfs",
                       options: ["nosuid", "nodev", "mode=1777", "size=1g"]}]' \
        "$tmp/config.json" >"$tmp/config.json.new"
    mv -f "$tmp/config.json.new" "$tmp/config.json"
    chmod 0644 "$tmp/config.json"
    # Bind-mount targets must exist in a read-only root.
    install -d -m 0755 "$tmp/rootfs/etc" "$tmp/rootfs/tmp"
    [ -e "$tmp/rootfs/etc/resolv.conf" ] || : >"$tmp/rootfs/etc/resolv.conf"
    chmod 0755 "$tmp"
    rm -rf "$bundle"
    mv "$tmp" "$bundle"
}

ensure_bundle() {
    local bundle="$DIR/bundles/busybox"
    if [ -s "$bundle/config.json" ] && [ -d "$bundle/rootfs" ]; then
        log "OCI bundle: $bundle"
        return
    fi
    if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
        warn "Docker is not available: no OCI bundle $bundle (--container jobs will fail until 'start' can make it)"
        return
    fi
    if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
        log "building $IMAGE"
        GPUHUB_BUSYBOX_IMAGE="$IMAGE" "$REPO/scripts/build-busybox-image.sh"
    fi
    log "OCI bundle: $bundle from $IMAGE"
    make_bundle "$IMAGE" busybox
    CHANGED=1
}

# --- commands --------------------------------------------------------------------------------------

cmd_start() {
    need_root
    check_settings
    local t0=$SECONDS
    CHANGED=0
    ensure_packages
    make_dirs
    write_configs
    # A changed configuration while daemons run: restart them so they read it.
    RESTART_SLURM=0
    if [ "$CONFIG_CHANGED" = 1 ] && pid_of "$DIR/run/slurmctld.pid" slurmctld >/dev/null; then
        log "configuration changed: restarting the Slurm daemons"
        RESTART_SLURM=1
    fi
    ensure_munge
    ensure_network
    if [ "$ACCOUNTING" = slurmdbd ]; then
        ensure_mariadb
        ensure_slurmdbd
    else
        stop_accounting
    fi
    ensure_slurmctld
    local n
    for ((n = 1; n <= NODES; n++)); do ensure_slurmd "$n"; done
    wait_nodes
    ensure_bundle
    if [ "$CHANGED" = 0 ]; then
        log "the cluster was already running; nothing changed"
    else
        log "cluster up in $((SECONDS - t0))s"
    fi
    sinfo -N -o '%N %T %c %m %G'
    cat <<EOF

# gpuhub.toml: point gpuhub at this cluster (the keys of crates/slurm's SlurmConfig).
engine = "slurm"
reconcile_secs = 10                   # Slurm's pending reasons refreshed this often
homes_dir = "$DIR/homes"              # users' homes, where the nodes reach them (give each cluster account
                                      # the UID gpuhub shows in \`gpuhub whoami\`, or map_usernames below)
# uid_range = "70000-99999"           # gpuhub's users' UIDs; this machine is the nodes, so their accounts
                                      # are host accounts in it: each named as its gpuhub user (see README)
[slurm]
conf = "$DIR/slurm.conf"          # SLURM_CONF for sbatch/squeue/scontrol/sacct/scancel/srun
partition = "$PARTITION"
bundle_dir = "$DIR/bundles"       # OCI bundles (--container), on storage every node reads
log_dir = "$DIR/gpuhub-logs"      # members' output, written by the nodes, read by the hub
oci_runtime = "$OCI_RUNTIME"
oci_root = "$DIR/run/oci"         # the runtime's state, as oci.conf's --root (exec needs it)
init = "/usr/bin/tini-static"     # each member's PID 1, as docker --init
accounting = "$ACCOUNTING"                  # "slurmdbd": sacct has finished jobs; "none": squeue for MinJobAge only
shards_per_gpu = $SHARDS_PER_GPU                   # --gres=shard:N, N of $SHARDS_PER_GPU, for a fraction of one GPU
map_usernames = true              # or accounts = { alice = "alice01" }: gpuhub user -> cluster account
EOF
}

stop_accounting() {
    local pid
    if pid="$(pid_of "$DIR/run/slurmdbd.pid" slurmdbd)"; then
        log "slurmdbd: stopping (pid $pid)"
        stop_pid "$pid"
    fi
    if pid="$(pid_of "$DIR/run/mysqld/mysqld.pid" mariadbd)"; then
        log "mariadbd: stopping (pid $pid)"
        stop_pid "$pid" 60
    fi
}

cmd_stop() {
    need_root
    local purge=0
    case "${1:-}" in --purge) purge=1 ;; "") ;; *) die "usage: $0 stop [--purge]" ;; esac
    local ns n pid pids
    # Nodes: slurmd first, then everything else left in the namespace (slurmstepd, jobs, containers).
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX[0-9]*$" || true); do
        n="${ns#"$NS_PREFIX"}"
        if pid="$(pid_of "$DIR/run/slurmd-node$n.pid" slurmd)"; then
            log "slurmd node$n: stopping (pid $pid)"
            stop_pid "$pid"
        fi
        pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
        if [ -n "${pids// /}" ]; then
            log "$ns: ending the processes left in it ($pids)"
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            sleep 1
            pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
            # shellcheck disable=SC2086
            [ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns"
        ip link del "$VETH_PREFIX$n" 2>/dev/null || true
        log "$ns: deleted"
    done
    # slurmd pid files of nodes whose namespace went missing.
    for f in "$DIR"/run/slurmd-node*.pid; do
        [ -e "$f" ] || continue
        pid="$(pid_of "$f" slurmd)" && stop_pid "$pid"
        rm -f "$f"
    done
    if pid="$(pid_of "$DIR/run/slurmctld.pid" slurmctld)"; then
        log "slurmctld: stopping (pid $pid)"
        stop_pid "$pid"
    fi
    stop_accounting
    if [ -s "$DIR/run/munged.ours" ]; then
        if pid="$(pid_of "$DIR/run/munged.ours" munged)"; then
            log "munged: stopping (pid $pid, started by this script)"
            stop_pid "$pid"
        fi
        rm -f "$DIR/run/munged.ours"
    fi
    if command -v iptables >/dev/null && fw_rule -C 2>/dev/null; then
        fw_rule -D
        log "iptables: FORWARD rule for $BRIDGE removed"
    fi
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE"
        log "bridge $BRIDGE: deleted"
    fi
    rm -rf "${DIR:?}/run/oci"/* 2>/dev/null || true
    if [ "$purge" = 1 ] && [ -d "$DIR" ]; then
        [ -e "$MARKER" ] || die "$DIR has no $(basename "$MARKER"): not deleting a directory this script did not make"
        rm -rf --one-file-system "${DIR:?}"
        log "deleted $DIR"
    fi
    log "stopped"
}

cmd_status() {
    need_root
    check_settings
    local down=0 up=0 pid n
    # Report the accounting the cluster was started with, whatever this shell's environment says.
    if grep -q '^AccountingStorageType=accounting_storage/none' "$SLURM_CONF" 2>/dev/null; then
        ACCOUNTING=none
    elif grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$SLURM_CONF" 2>/dev/null; then
        ACCOUNTING=slurmdbd
    fi
    show() { # NAME OK DETAIL
        if [ "$2" = 1 ]; then up=$((up + 1)); printf '  %-22s running  %s\n' "$1" "$3"
        else down=$((down + 1)); printf '  %-22s STOPPED  %s\n' "$1" "$3"; fi
    }
    echo "gpuhub Slurm dev cluster in $DIR"
    if munge_works; then show munged 1 "/run/munge"; else show munged 0 ""; fi
    if ip -o -4 addr show dev "$BRIDGE" 2>/dev/null | grep -q " $CTL_ADDR/24 "; then
        show "bridge $BRIDGE" 1 "$CTL_ADDR/24"
    else
        show "bridge $BRIDGE" 0 ""
    fi
    if [ "$ACCOUNTING" = slurmdbd ]; then
        if pid="$(pid_of "$DIR/run/mysqld/mysqld.pid" mariadbd)"; then show mariadbd 1 "pid $pid"; else show mariadbd 0 ""; fi
        if pid="$(pid_of "$DIR/run/slurmdbd.pid" slurmdbd)"; then show slurmdbd 1 "pid $pid $CTL_ADDR:6819"; else show slurmdbd 0 ""; fi
    fi
    if pid="$(pid_of "$DIR/run/slurmctld.pid" slurmctld)"; then show slurmctld 1 "pid $pid $CTL_ADDR:6817"; else show slurmctld 0 ""; fi
    for ((n = 1; n <= NODES; n++)); do
        if [ ! -e "/run/netns/$NS_PREFIX$n" ]; then
            show "netns $NS_PREFIX$n" 0 ""
        elif ip -n "$NS_PREFIX$n" -o -4 addr show dev eth0 2>/dev/null | grep -q " $(node_addr "$n")/24 " &&
            [ "$(cat "/sys/class/net/$VETH_PREFIX$n/master/ifindex" 2>/dev/null)" = "$(cat "/sys/class/net/$BRIDGE/ifindex" 2>/dev/null)" ]; then
            show "netns $NS_PREFIX$n" 1 "$(node_addr "$n") via $VETH_PREFIX$n"
        else
            show "netns $NS_PREFIX$n" 0 "(no eth0 $(node_addr "$n") on $BRIDGE)"
        fi
        if pid="$(slurmd_pid "$n")"; then show "slurmd node$n" 1 "pid $pid"
        elif [ -n "$pid" ]; then show "slurmd node$n" 0 "(pid $pid runs outside $NS_PREFIX$n)"
        else show "slurmd node$n" 0 ""; fi
    done
    if [ -f "$SLURM_CONF" ] && ctld_up; then
        echo
        sinfo
        echo
        sinfo -N -o '%N %T %c %m %G %E'
    fi
    if [ "$down" = 0 ]; then return 0; fi
    if [ "$up" = 0 ]; then echo "the cluster is stopped"; return 3; fi
    echo "the cluster is only partly running: run '$0 start' to repair it" >&2
    return 1
}

cmd_bundle() {
    need_root
    [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 bundle IMAGE [NAME]"
    local image=$1 name=${2:-}
    if [ -z "$name" ]; then
        name="${image##*/}"
        name="${name%%:*}"
    fi
    install -d -m 0755 "$DIR/images" "$DIR/bundles"
    make_bundle "$image" "$name"
    log "bundle $DIR/bundles/$name (from $image): srun --container=$DIR/bundles/$name ..."
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status "$@" ;;
    bundle) shift; cmd_bundle "$@" ;;
    __enter) shift; enter_namespace "$@" ;;
    *) echo "usage: $0 start | stop [--purge] | status | bundle IMAGE [NAME]" >&2; exit 2 ;;
esac
