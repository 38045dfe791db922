#!/bin/sh
# toolpool mcp against the official MCP TypeScript SDK's client: installs
# @modelcontextprotocol/sdk (pinned) into the build directory, never
# globally, then runs tests/mcp_client_test.mjs with Node's test runner.
#
# 1.32.2 is the newest 1.x (the line published as @modelcontextprotocol/sdk):
# its client asks for protocol 2025-11-25, the newest toolpool speaks, and it
# runs on Node 18 and later (Debian 12 has 18, this project's machines 20).
#
# Without node and npm, or when the npm registry cannot be reached from
# here (no network, or a proxy whose certificate npm is not set up to
# trust), the test is skipped (exit 77), saying why; CI has both
# (scripts/install-deps installs node and npm).
set -eu
SDK_VERSION=1.32.2
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${TOOLPOOL_BUILD_DIR:-$HERE/../build}
NPM_DIR=${TOOLPOOL_NPM_DIR:-$BUILD/npm}
export TOOLPOOL_BUILD_DIR="$BUILD" TOOLPOOL_NPM_DIR="$NPM_DIR"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "mcp_sdk_test: SKIPPED: node and npm are not installed (scripts/install-deps installs them)"
    exit 77
fi
PKG="$NPM_DIR/node_modules/@modelcontextprotocol/sdk/package.json"
have=$(node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' "$PKG")
if [ "$have" != "$SDK_VERSION" ]; then
    echo "mcp_sdk_test: installing @modelcontextprotocol/sdk@$SDK_VERSION into $NPM_DIR"
    mkdir -p "$NPM_DIR"
    if ! npm install --prefix "$NPM_DIR" --no-save --no-package-lock --no-audit --no-fund \
        "@modelcontextprotocol/sdk@$SDK_VERSION"; then
        echo "mcp_sdk_test: SKIPPED: @modelcontextprotocol/sdk@$SDK_VERSION could not be installed from the npm registry (npm's error above)"
        exit 77
    fi
fi
exec node --test --test-reporter=spec "$HERE/mcp_client_test.mjs" "$HERE/mcp_http_client_test.mjs"
