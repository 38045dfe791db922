#!/bin/sh
# The mcp adapter against real MCP servers from npm
# (@modelcontextprotocol/server-everything and server-filesystem, pinned in
# tests/npm_deps.sh, installed into the build directory), and the gateway
# chain: toolpool mcp fronting server-everything, driven by the SDK's
# client. Runs tests/mcp_servers_test.mjs with Node's test runner; skipped
# (exit 77), saying why, without node and npm or the npm registry.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${TOOLPOOL_BUILD_DIR:-$HERE/../build}
NPM_DIR=${TOOLPOOL_NPM_DIR:-$BUILD/npm}
export TOOLPOOL_BUILD_DIR="$BUILD" TOOLPOOL_NPM_DIR="$NPM_DIR"
. "$HERE/npm_deps.sh"
npm_deps mcp_servers_test
exec node --test --test-reporter=spec "$HERE/mcp_servers_test.mjs"
