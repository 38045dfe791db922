#!/bin/bash
# A private, real Slurm cluster on this one machine, for the tests: munged,
# slurmctld and N slurmd (Debian's Slurm runs several slurmd on one host, each
# a node of its own), no systemd, no cgroups, no accounting database.
#
#   SLURM_PREFIX  its state, configuration, sockets and logs (default /tmp/tp-slurm;
#                 keep it short: munge's socket path must stay under 108 bytes)
#   SLURM_NODES   slurmd "nodes" (default 2)
#   SLURM_PORT    slurmctld's port; node i listens on SLURM_PORT+i (default 16817)
#   UP_TIMEOUT    seconds to wait for the nodes to be idle (default 60)
#
# Exit 0: up, `source $SLURM_PREFIX/env.sh` for SLURM_CONF. Exit 77: Slurm is
# not installed and cannot be (no root, no package source). Else 1, with
# the daemons it started stopped again (tests/slurm/slurm-down.sh).
set -euo pipefail
trap "" PIPE
R=${SLURM_PREFIX:-/tmp/tp-slurm}
NODES=${SLURM_NODES:-2}
PORT=${SLURM_PORT:-16817}
UP_TIMEOUT=${UP_TIMEOUT:-60}
HERE=$(dirname "$(readlink -f "$0")")
CONF=$R/etc/slurm.conf
export SLURM_CONF=$CONF
log() { echo "[slurm-up] $*" >&2; }

# 1. The packages (a package install starts no daemon: policy-rc.d says 101).
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null ||
    ! command -v munged >/dev/null; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || { log "Slurm is not installed, and apt-get cannot install it here"; exit 77; }
    log "installing slurmctld slurmd slurm-client munge"
    export DEBIAN_FRONTEND=noninteractive
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
    fi
    aptlog=$(mktemp)
    ok=1
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >"$aptlog" 2>&1 ||
        { apt-get update -q >>"$aptlog" 2>&1 &&
            apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >>"$aptlog" 2>&1; } ||
        ok=0
    [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ $ok = 0 ]; then
        tail -5 "$aptlog" >&2
        rm -f "$aptlog"
        log "cannot install Slurm"
        exit 77
    fi
    rm -f "$aptlog"
fi

# On any failure from here: stop what was started, keep the logs.
on_exit() {
    local rc=$?
    if [ $rc != 0 ]; then
        log "failed (exit $rc); logs in $R/log"
        for f in "$R"/log/*.log; do [ -f "$f" ] && tail -5 "$f" >&2; done
        SLURM_PREFIX=$R KEEP_STATE=1 "$HERE/slurm-down.sh" || true
    fi
}
trap on_exit EXIT

[ -d "$R" ] && SLURM_PREFIX=$R "$HERE/slurm-down.sh"
for p in $(seq "$PORT" $((PORT + NODES))); do
    if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then log "port $p is taken"; exit 1; fi
done
mkdir -p "$R"/etc "$R"/run "$R"/log "$R"/state "$R"/spool "$R"/munge
chmod 755 "$R" "$R/munge" # munged wants o+x on its socket's folder

# 2. munge: a key and a socket of its own.
if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$R/munge/munge.key" --force
else
    dd if=/dev/urandom of="$R/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 600 "$R/munge/munge.key"
SOCK=$R/munge/munge.socket
munged --socket="$SOCK" --key-file="$R/munge/munge.key" --log-file="$R/log/munged.log" \
    --pid-file="$R/run/munged.pid" --seed-file="$R/munge/munged.seed" </dev/null >/dev/null 2>&1
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
munge -S "$SOCK" -n | unmunge -S "$SOCK" >/dev/null

# 3. slurm.conf: explicit loopback addresses (an unresolvable hostname makes
# every client command hang for seconds), no cgroups, RealMemory set (its
# default of 1 MB fails every --mem), scheduling without its usual delays.
H=$(hostname -s)
MEM=$(($(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) / 2 / NODES))
cat >"$CONF" <<CONF
ClusterName=tptest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
SlurmctldPidFile=$R/run/slurmctld.pid
SlurmdPidFile=$R/run/slurmd.%n.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$R/log/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
MinJobAge=300
KillWait=5
NodeName=tp[1-$NODES] NodeHostname=$H NodeAddr=127.0.0.1 Port=[$((PORT + 1))-$((PORT + NODES))] CPUs=$(nproc) RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
echo "export SLURM_CONF=$CONF" >"$R/env.sh"

# 4. The daemons, their output off the caller's pipes; then every node idle.
slurmctld -f "$CONF" -i </dev/null >"$R/log/slurmctld.stderr" 2>&1
end=$((SECONDS + UP_TIMEOUT))
until timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; do
    [ $SECONDS -lt $end ] || { log "slurmctld is not up"; exit 1; }
    sleep 0.1
done
for i in $(seq "$NODES"); do
    mkdir -p "$R/spool/tp$i"
    slurmd -f "$CONF" -N "tp$i" </dev/null >"$R/log/slurmd.tp$i.stderr" 2>&1
done
until [ "$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')" = "idle " ]; do
    [ $SECONDS -lt $end ] || { log "the nodes are not idle:"; timeout 5 sinfo -N >&2 || true; exit 1; }
    sleep 0.1
done
log "up: $NODES nodes, SLURM_CONF=$CONF"
