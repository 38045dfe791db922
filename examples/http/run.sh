#!/bin/sh
# The http example: starts the flaky API (api.py) on a free port of
# 127.0.0.1, runs the calls against it with a fresh store, and stops it.
#   examples/http/run.sh [TOOLPOOL]     TOOLPOOL: the program (default: build/toolpool)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
toolpool=${1:-$here/../../build/toolpool}
work=$(mktemp -d)
trap 'exec 3>&-; rm -rf "$work"' EXIT
mkfifo "$work/in"
python3 "$here/api.py" <"$work/in" >"$work/port" &
exec 3>"$work/in" # the API lives while this stays open
while [ ! -s "$work/port" ]; do sleep 0.05; done
EXAMPLE_API_PORT=$(head -1 "$work/port")
export EXAMPLE_API_PORT
status=0
"$toolpool" run --registry "$here/tools.json" --store "$work/store" "$here/calls.jsonl" || status=$?
# 1: some calls failed (the refused delete), as the scenario has it
exit $((status == 1 ? 0 : status))
