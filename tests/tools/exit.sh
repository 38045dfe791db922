#!/bin/sh
# Exits with status $1, saying so on stderr.
cat >/dev/null
echo "exiting with $1" >&2
exit "$1"
