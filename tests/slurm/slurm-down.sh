#!/bin/bash
# Stops the cluster tests/slurm/slurm-up.sh started under SLURM_PREFIX (default
# /tmp/tp-slurm) and removes its folder (KEEP_STATE=1 keeps it). It stops
# only the processes of its pid files (checked by /proc/PID/comm), and the
# slurmstepd processes that carry its SLURM_CONF, with what runs under them.
set -uo pipefail
trap "" PIPE
R=${SLURM_PREFIX:-/tmp/tp-slurm}
CONF=$R/etc/slurm.conf
export SLURM_CONF=$CONF
[ -d "$R" ] || exit 0

# Jobs first, so that their steps end under Slurm's own control.
if [ -f "$CONF" ] && timeout 3 scontrol ping 2>/dev/null | grep -q 'is UP'; then
    timeout 5 scancel --full --user="$(id -un)" 2>/dev/null || true
    end=$((SECONDS + 10))
    while [ $SECONDS -lt $end ] && [ -n "$(timeout 3 squeue -h -t R,CG,PD,CF -o %i 2>/dev/null)" ]; do sleep 0.1; done
fi

pids=()
for f in "$R"/run/slurmd.*.pid "$R"/run/slurmctld.pid "$R"/run/munged.pid; do
    [ -s "$f" ] || continue
    p=$(cat "$f")
    comm=$(basename "$f" .pid)
    comm=${comm%%.*}
    if [ -d "/proc/$p" ] && grep -qx "$comm" "/proc/$p/comm" 2>/dev/null; then
        kill -TERM "$p" 2>/dev/null && pids+=("$p:$comm")
    fi
done
for _ in $(seq 150); do
    left=0
    for e in "${pids[@]}"; do [ -d "/proc/${e%%:*}" ] && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
done
for e in "${pids[@]}"; do
    p=${e%%:*}
    [ -d "/proc/$p" ] && grep -qx "${e#*:}" "/proc/$p/comm" 2>/dev/null && kill -KILL "$p" 2>/dev/null
done

# slurmstepd left behind (a slurmd killed under a running job), and their trees.
stray=()
for d in /proc/[0-9]*; do
    c=
    { read -r c <"$d/comm"; } 2>/dev/null
    [ "$c" = slurmstepd ] || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "SLURM_CONF=$CONF" && stray+=("${d#/proc/}")
done
if [ ${#stray[@]} -gt 0 ]; then
    tree=$(ps -eo pid=,ppid= | awk -v roots="${stray[*]}" '
        { kids[$2] = kids[$2] " " $1 }
        END { n = split(roots, q, " "); for (i = 1; i <= n; i++) { print q[i];
              m = split(kids[q[i]], k, " "); for (j = 1; j <= m; j++) q[++n] = k[j] } }')
    # shellcheck disable=SC2086
    kill -KILL $tree 2>/dev/null
fi
[ "${KEEP_STATE:-0}" = 1 ] || rm -rf "$R"
exit 0
