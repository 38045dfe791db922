#!/bin/sh
# toolpool mcp against the official MCP TypeScript SDK's client: installs
# the pinned npm packages (tests/npm_deps.sh) into the build directory,
# never globally, then runs tests/mcp_client_test.mjs with Node's test
# runner. Skipped (exit 77), saying why, without node and npm or when the
# npm registry cannot be reached from here; CI has both
# (scripts/install-deps installs node and npm).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${TOOLPOOL_BUILD_DIR:-$HERE/../build}
NPM_DIR=${TOOLPOOL_NPM_DIR:-$BUILD/npm}
export TOOLPOOL_BUILD_DIR="$BUILD" TOOLPOOL_NPM_DIR="$NPM_DIR"
. "$HERE/npm_deps.sh"
npm_deps mcp_sdk_test
exec node --test --test-reporter=spec "$HERE/mcp_client_test.mjs" "$HERE/mcp_http_client_test.mjs"
