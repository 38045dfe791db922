#!/bin/sh
# The agent holds no delete permission: a permanent failure, as JSON on stdout.
cat >/dev/null
printf '{"error": "PermissionDenied", "message": "403: role agent may not delete records"}\n'
