#!/bin/sh
# toolpool mcp and serve's /mcp against the MCP TypeScript SDK's v2 client
# (@modelcontextprotocol/client, pinned below): installs it into a folder
# of the build of its own ($TOOLPOOL_SDK2_NPM_DIR, default build/npm-sdk2:
# the v1 SDK of mcp_sdk_test lives beside it in build/npm), never
# globally, then runs tests/mcp_sdk2_test.mjs with Node's test runner.
# Skipped (exit 77), saying why, without node and npm or when the package
# cannot be installed. 2.4.0 speaks MCP 2026-07-28 and falls back to
# 2025-11-25, which toolpool speaks; it runs on Node 20.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${TOOLPOOL_BUILD_DIR:-$HERE/../build}
NPM_DIR=${TOOLPOOL_SDK2_NPM_DIR:-$BUILD/npm-sdk2}
export TOOLPOOL_BUILD_DIR="$BUILD" TOOLPOOL_SDK2_NPM_DIR="$NPM_DIR"
. "$HERE/npm_deps.sh"
# The client, and the server that mcp_sdk2_server_test.py imports (through
# `mcp_sdk2_test.sh --install`, which installs and stops): one line, as npm
# prunes what a later install does not name.
NPM_PACKAGES="@modelcontextprotocol/client@2.4.0 @modelcontextprotocol/server@2.4.0"
npm_deps mcp_sdk2_test
[ "${1:-}" = --install ] && exit 0
exec node --test --test-reporter=spec "$HERE/mcp_sdk2_test.mjs"
