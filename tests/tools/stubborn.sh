#!/bin/sh
# Hangs and ignores SIGTERM; records its pid in $1. Only SIGKILL stops it.
trap '' TERM
echo $$ > "$1"
while :; do sleep 0.05; done
