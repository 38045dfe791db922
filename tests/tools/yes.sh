#!/bin/sh
# Writes without end: the output cap must stop it.
cat >/dev/null
exec yes toolpool
