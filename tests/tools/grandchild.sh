#!/bin/sh
# Starts a grandchild that hangs, records its pid in $1, and hangs too.
sleep 3600 &
echo $! > "$1"
wait
