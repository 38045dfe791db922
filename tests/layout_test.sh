#!/bin/sh
# The layout's rules, checked on the source tree and the build:
#   - toolpool-worker links none of the supervisor's libraries (LMDB,
#     libevent, PCRE2, xxhash): common/ is what both processes link;
#   - a file under common/ includes only headers of common/ (and the
#     generated protobuf header, and include/);
#   - a component's *_internal.h is included only from its own folder;
#   - the fronts and the commands see of the engine only its interface
#     (engine.h, the summary they report, the commit options they take):
#     its jobs, calls, policies and transaction stay its own.
# Usage: layout_test.sh SOURCE_DIR BUILD_DIR
src=$1
build=$2
fail=0
say() { echo "layout_test: $*" >&2; fail=1; }

needed=$(readelf -d "$build/toolpool-worker" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || say "cannot read what $build/toolpool-worker links"
for lib in $needed; do
    case $lib in
    liblmdb* | libevent* | libpcre2* | libxxhash*) say "toolpool-worker links $lib: only the supervisor may" ;;
    esac
done

for f in $(find "$src/common" -name '*.[ch]'); do
    for h in $(sed -n 's/^#include "\(.*\)"/\1/p' "$f"); do
        [ "$h" = toolpool.pb-c.h ] && continue
        [ -n "$(find "$src/common" "$src/include" -name "$(basename "$h")" -print -quit)" ] ||
            say "${f#"$src"/} includes $h, which is not under common/"
    done
done

for h in $(find "$src/common" "$src/supervisor" "$src/worker" -name '*_internal.h'); do
    dir=$(dirname "$h")
    name=$(basename "$h")
    for f in $(grep -rl --include='*.[ch]' "#include \"$name\"" "$src/common" "$src/supervisor" "$src/worker" \
        "$src/tools" "$src/tests"); do
        [ "$(dirname "$f")" = "$dir" ] || say "${f#"$src"/} includes $name, internal to ${dir#"$src"/}"
    done
done

public="engine.h summary.h commit.h scoreboard.h metrics_text.h"
for h in $(find "$src/supervisor/engine" -name '*.h'); do
    name=$(basename "$h")
    case " $public " in *" $name "*) continue ;; esac
    for f in $(grep -rl --include='*.[ch]' "#include \"$name\"" "$src/supervisor/front" "$src/tools"); do
        say "${f#"$src"/} includes $name, which is the engine's own (fronts use engine.h)"
    done
done

[ $fail = 0 ] && echo "layout_test: 4 rules hold"
exit $fail
