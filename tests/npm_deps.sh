# Sourced by the tests that need packages from npm (mcp_sdk_test.sh,
# mcp_servers_test.sh): installs the pinned set below into one folder of the
# build ($TOOLPOOL_NPM_DIR, default build/npm), never globally, once (a
# lock keeps two tests from installing at the same time), and exits 77
# (skipped), saying why, without node and npm or when the npm registry
# cannot be reached from here.
#
# 1.32.2 is the newest 1.x of the SDK (the line published as
# @modelcontextprotocol/sdk): its client asks for protocol 2025-11-25, the
# newest toolpool speaks. The reference servers are versioned by date;
# 2026.8.31 of both runs on Node 20 (they declare no engines; the tests run
# them there) and answers 2025-11-25.
NPM_PACKAGES="@modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31"

npm_deps() {
    name=$1
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "$name: SKIPPED: node and npm are not installed (scripts/install-deps installs them)"
        exit 77
    fi
    mkdir -p "$NPM_DIR"
    (
        flock 9
        missing=
        for spec in $NPM_PACKAGES; do
            pkg=${spec%@*}
            want=${spec##*@}
            have=$(node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
                "$NPM_DIR/node_modules/$pkg/package.json")
            [ "$have" = "$want" ] || missing="$missing $spec"
        done
        if [ -n "$missing" ]; then
            echo "$name: installing$missing into $NPM_DIR"
            # the whole set at once: npm prunes what a later install does not name
            npm install --prefix "$NPM_DIR" --no-save --no-package-lock --no-audit --no-fund $NPM_PACKAGES || exit 77
        fi
    ) 9>"$NPM_DIR/.lock" || {
        echo "$name: SKIPPED: $NPM_PACKAGES could not be installed from the npm registry (npm's error above)"
        exit 77
    }
}
