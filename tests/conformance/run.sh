#!/bin/sh
# toolpool serve's /mcp against the official MCP conformance suite's server
# scenarios (@modelcontextprotocol/conformance, pinned below; 0.1.16's
# for 2025-11-25 and 2025-06-18, and 0.2's 2026-07-28 requirement set), on the tools
# of tools.json: one MCP server of our own (fixture_server.py) with the
# tools the scenarios call, behind toolpool's mcp adapter. Runs the active
# suite, then json-schema-2020-12 (pending in 0.1.16 for a reason of the
# TypeScript SDK's, not of the server under test), each against
# expected-failures.yaml, the scenarios toolpool fails and why: exits 1
# when a scenario outside that list fails, when one in it passes, or when
# a check of a listed scenario that should pass fails (check_results.mjs).
#
# The suite is installed with tests/npm_deps.sh into a folder of the build
# of its own ($TOOLPOOL_CONFORMANCE_NPM_DIR, default build/npm-conformance),
# never globally; skipped (exit 77), saying why, without node, npm or
# python3, or when the package cannot be installed from here.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TESTS=$(dirname "$HERE")
BUILD=${TOOLPOOL_BUILD_DIR:-$TESTS/../build}
NPM_DIR=${TOOLPOOL_CONFORMANCE_NPM_DIR:-$BUILD/npm-conformance}
TOOLPOOL=$BUILD/toolpool
. "$TESTS/npm_deps.sh"
# npm_deps installs this set (its own, above, is for the SDK tests). The
# server scenarios of 0.1.16 speak 2025-06-18 and 2025-11-25; 2026-07-28's
# requirement set is in the 0.2 line, still an alpha, installed beside it
# in a folder of its own ($NPM_DIR-2026).
# shellcheck disable=SC2034
NPM_PACKAGES="@modelcontextprotocol/conformance@0.1.16"
NEXT_PACKAGES="@modelcontextprotocol/conformance@0.2.0-alpha.12"
NEXT_DIR=$NPM_DIR-2026

if ! command -v python3 >/dev/null 2>&1; then
    echo "mcp_conformance_test: SKIPPED: python3 is not installed (the fixture MCP server needs it)"
    exit 77
fi
[ -x "$TOOLPOOL" ] || { echo "mcp_conformance_test: no toolpool at $TOOLPOOL"; exit 1; }
npm_deps mcp_conformance_test
PKG=$NPM_DIR/node_modules/@modelcontextprotocol/conformance
NPM_DIR=$NEXT_DIR
NPM_PACKAGES=$NEXT_PACKAGES
npm_deps mcp_conformance_test
NEXT=$NEXT_DIR/node_modules/@modelcontextprotocol/conformance

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcp_conformance_test.XXXXXX")
pid=
serve_rc=0
stop() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        serve_rc=0
        wait "$pid" 2>/dev/null || serve_rc=$?
        pid=
    fi
}
trap 'stop; rm -rf "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

"$TOOLPOOL" serve --registry "$HERE/tools.json" --store "$tmp/store" -j 2 --drain 5s \
    --listen 127.0.0.1:0 >"$tmp/serve.log" 2>&1 &
pid=$!
# the port it took, from its startup line
addr=
tries=0
while [ -z "$addr" ]; do
    addr=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9][0-9]*\).*/\1/p' "$tmp/serve.log" | head -n 1)
    [ -n "$addr" ] && break
    if ! kill -0 "$pid" 2>/dev/null || [ "$tries" -ge 200 ]; then
        echo "mcp_conformance_test: toolpool serve did not start:"
        cat "$tmp/serve.log"
        exit 1
    fi
    tries=$((tries + 1))
    sleep 0.1
done
url=http://$addr/mcp
echo "mcp_conformance_test: toolpool serve at $url"

# suite PACKAGE BASELINE RESULTS [ARGS]
suite() {
    pkg=$1 baseline=$2 results=$3
    shift 3
    node --import "$HERE/register.mjs" "$pkg/dist/index.js" server --url "$url" \
        --expected-failures "$baseline" -o "$results" "$@"
}
status=0
suite "$PKG" "$HERE/expected-failures.yaml" "$tmp/results" --suite active || status=1
suite "$PKG" "$HERE/expected-failures.yaml" "$tmp/results" --scenario json-schema-2020-12 || status=1
echo
echo "=== checks that failed ==="
node "$HERE/check_results.mjs" "$tmp/results" "$HERE/expected-failures.yaml" "$PKG" || status=1
echo
echo "=== 2026-07-28's requirement set ==="
suite "$NEXT" "$HERE/expected-failures-2026-07-28.yaml" "$tmp/results-2026" --requirements 2026-07-28 || status=1
echo
echo "=== checks that failed (2026-07-28) ==="
node "$HERE/check_results.mjs" "$tmp/results-2026" "$HERE/expected-failures-2026-07-28.yaml" "$NEXT" || status=1

stop
if [ "$serve_rc" -ne 0 ]; then
    echo "mcp_conformance_test: toolpool serve exited with status $serve_rc after SIGTERM"
    status=1
fi
if [ "$status" -ne 0 ]; then
    echo
    echo "=== toolpool serve's log ==="
    tail -n 100 "$tmp/serve.log"
    echo "mcp_conformance_test: FAILED"
else
    echo "mcp_conformance_test: passed"
fi
exit "$status"
