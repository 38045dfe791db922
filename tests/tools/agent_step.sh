#!/bin/sh
# A tool for the Python tests: answers its args (or {} when $3 is "empty"),
# and appends "JOB STEP CALL_ID" to the file $1 each time it runs to the end,
# so a test counts how often each call really ran.
# Gate: when the file $2 exists and has the line "JOB STEP" (or "CALL_ID"),
# the tool first appends that line to $2.reached and hangs, without
# appending to $1: the test kills toolpool while the call runs.
args=$(cat)
if [ -n "${2:-}" ] && [ -f "$2" ] &&
    grep -qx -e "$TOOLPOOL_JOB $TOOLPOOL_STEP" -e "$TOOLPOOL_CALL_ID" "$2"; then
    echo "$TOOLPOOL_JOB $TOOLPOOL_STEP $TOOLPOOL_CALL_ID" >> "$2.reached"
    exec sleep 3600
fi
echo "$TOOLPOOL_JOB $TOOLPOOL_STEP $TOOLPOOL_CALL_ID" >> "$1"
if [ "${3:-}" = empty ]; then
    echo '{}'
else
    printf '%s\n' "$args"
fi
