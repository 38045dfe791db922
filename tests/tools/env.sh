#!/bin/sh
# Answers with the call's environment, the fds the tool inherited and its
# scheduling policy (field 41 of /proc/PID/stat; the name field has no space).
cat >/dev/null
fds=$(ls /proc/self/fd | tr '\n' ' ')
set -- $(cat /proc/$$/stat)
printf '{"id":"%s","job":"%s","step":"%s","attempt":"%s","fds":"%s","policy":"%s"}' \
    "$TOOLPOOL_CALL_ID" "$TOOLPOOL_JOB" "$TOOLPOOL_STEP" "$TOOLPOOL_ATTEMPT" "$fds" "${41}"
