#!/bin/sh
# A well-behaved tool: reads its args on stdin, answers on stdout.
args=$(cat)
printf '{"order": "A-1001", "status": "shipped", "args_seen": %s}\n' "$args"
