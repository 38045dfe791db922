#!/bin/sh
# Leaves a `sleep 300` running, named $1 in its argv so a test can find it,
# started the way $2 says:
#   setsid   in a session of its own (out of the worker's process group)
#   daemon   double-forked: in a session of its own, its parent gone at once
# then does what $3 says:
#   hang     never answers
#   exit     answers {} at once
#   hold     answers {} at once, the sleep keeping the tool's stdout open
cat >/dev/null
leave() {
    if [ "$3" = hold ]; then
        setsid bash -c 'exec -a "$0" sleep 300' "$1" </dev/null 2>/dev/null
    else
        setsid bash -c 'exec -a "$0" sleep 300' "$1" </dev/null >/dev/null 2>&1
    fi
}
case $2 in
setsid) leave "$@" & ;;
daemon) ( leave "$@" & ) ;;
esac
case $3 in
hang) exec sleep 3600 ;;
*) echo '{}' ;;
esac
