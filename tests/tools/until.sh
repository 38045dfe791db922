#!/bin/sh
# Notes its run (the call id, a line in file $2), then: when file $1 exists,
# answers {"fixed": true}; otherwise fails with exit status $3, or, when $3
# is "hang", sleeps for a minute (a call to interrupt).
cat >/dev/null
echo "$TOOLPOOL_CALL_ID" >> "$2"
if [ -e "$1" ]; then
    echo '{"fixed": true}'
    exit 0
fi
if [ "$3" = hang ]; then
    sleep 60
    exit 0
fi
exit "$3"
