#!/bin/bash
# examples/slurm on a real Slurm cluster brought up here (tests/slurm/slurm-up.sh:
# munged, slurmctld, two slurmd as two nodes): the shards' job array and the
# merge job submitted with sbatch, afterok between them, and the merged
# results checked record by record against one machine's run of the same
# file. Exit 77 (skipped) where Slurm cannot be installed. Everything it
# started is stopped on the way out, whatever happens.
#   usage: slurm_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$(readlink -f "$1")
BUILD=$(readlink -f "$2")
export TOOLPOOL_BUILD_DIR=$BUILD TOOLPOOL_SRC=$SRC
export SLURM_PREFIX=/tmp/tp-slurm-$$
export SLURM_NODES=2
export SLURM_PORT=$((16817 + ($$ % 1000) * 3))
T=$(mktemp -d /tmp/tp-slurm-test.XXXXXX)
cleanup() {
    "$SRC/tests/slurm/slurm-down.sh" || true
    rm -rf "$T"
}
trap cleanup EXIT

rc=0
"$SRC/tests/slurm/slurm-up.sh" || rc=$?
if [ $rc = 77 ]; then
    echo "slurm_test: skipped: Slurm is not installed and cannot be here"
    exit 77
fi
[ $rc = 0 ] || { echo "slurm_test: the cluster did not come up" >&2; exit 1; }
# shellcheck disable=SC1091
. "$SLURM_PREFIX/env.sh"

# The eval test's agent-like jobs: retries, timeouts, circuits that open.
mkdir -p "$T/shared"
python3 - "$T/shared" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["TOOLPOOL_SRC"], "tests"))
from eval_test import EVAL_REGISTRY, eval_calls
with open(os.path.join(sys.argv[1], "tools.json"), "w") as f:
    json.dump(EVAL_REGISTRY, f)
with open(os.path.join(sys.argv[1], "calls.jsonl"), "w") as f:
    f.writelines(json.dumps(c) + "\n" for c in eval_calls(jobs=12, steps=6))
PY
"$BUILD/toolpool" run -q -r "$T/shared/tools.json" -s "$T/one" -o "$T/one.jsonl" "$T/shared/calls.jsonl" || [ $? = 1 ]

export TOOLPOOL=$BUILD/toolpool TP_SHARED=$T/shared TP_LOCAL=$T/local
mkdir -p "$TP_LOCAL"
array=$(sbatch --parsable --chdir="$T" --array=0-3 "$SRC/examples/slurm/shards.sbatch")
merge=$(sbatch --parsable --chdir="$T" --dependency="afterok:$array" "$SRC/examples/slurm/merge.sbatch")
echo "slurm_test: array $array, merge $merge"
end=$((SECONDS + 90))
while [ -n "$(squeue -h -j "$array,$merge" -o %i 2>/dev/null)" ]; do
    reason=$(squeue -h -j "$merge" -o %r 2>/dev/null || true)
    if [ "$reason" = DependencyNeverSatisfied ]; then
        echo "slurm_test: a shard failed; the merge will never run" >&2
        cat "$T"/toolpool-shard-*.out >&2 || true
        exit 1
    fi
    [ $SECONDS -lt $end ] || { echo "slurm_test: jobs still queued after 90 s" >&2; squeue >&2; exit 1; }
    sleep 0.3
done
if [ ! -s "$T/shared/results.jsonl" ]; then
    echo "slurm_test: no merged results" >&2
    cat "$T"/toolpool-*.out "$SLURM_PREFIX"/log/jobcomp.txt >&2 || true
    exit 1
fi
cat "$T/shared/shard-status.txt"
if grep -l -e Sanitizer -e 'runtime error:' "$T"/toolpool-*.out; then
    echo "slurm_test: a sanitizer spoke in a job's output" >&2
    exit 1
fi
python3 - "$T/one.jsonl" "$T/shared/results.jsonl" "$T/shared" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["TOOLPOOL_SRC"], "tests"))
from eval_test import normalized
one, merged, shared = sys.argv[1:]
with open(one) as f:
    a = normalized(f)
with open(merged) as f:
    lines = f.readlines()
b = normalized(lines)
with open(os.path.join(shared, "calls.jsonl")) as f:
    order = [json.loads(l)["id"] for l in f]
assert [json.loads(l)["id"] for l in lines] == order, "merged results not in the calls file's order"
assert a == b, "merged records differ from one machine's: %s" % sorted(k for k in a if a[k] != b.get(k))[:5]
shards = sorted(d for d in os.listdir(shared) if d.startswith("shard-") and os.path.isdir(os.path.join(shared, d)))
assert shards == ["shard-%d" % k for k in range(4)], shards
print("slurm_test: %d records merged from %d shards equal one machine's" % (len(b), len(shards)))
PY
