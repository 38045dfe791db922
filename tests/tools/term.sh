#!/bin/sh
# Hangs; on SIGTERM writes "term" to $1 and exits (a tool that cleans up).
trap 'echo term > "$1"; exit 0' TERM
sleep 3600 &
wait
