#!/bin/sh
# examples/http/run.sh, run as a user would, its results checked: the
# rate-limited call waits its Retry-After and succeeds, the broken search
# falls back to its stale cache, the delete is refused, the note is posted.
# Usage: example_http.sh SOURCE_DIR TOOLPOOL
set -eu
out=$("$1/examples/http/run.sh" "$2" 2>/dev/null)
printf '%s\n' "$out" | python3 -c '
import json, sys
rows = {r["id"]: r for r in map(json.loads, sys.stdin)}
assert len(rows) == 4, rows.keys()
h1, h2, h3, h4 = (rows[k] for k in ("h1", "h2", "h3", "h4"))
assert h1["ok"] and h1["attempts"] == 2 and h1["trace"][0]["outcome"] == "RateLimited", h1
assert h1["trace"][0]["backoff_ms"] >= 1000, h1
assert h1["result"]["rates"] == {"EUR": 0.92, "JPY": 151.3}, h1
assert h2["ok"] and h2["served_by"] == "search_cache" and h2["degraded"] and h2["stale"], h2
assert [t["outcome"] for t in h2["trace"]] == ["ServerError"] * 3 + ["ok"], h2
assert not h3["ok"] and h3["error"] == "PermissionDenied" and h3["attempts"] == 1, h3
assert "role agent may not delete" in h3["message"], h3
assert h4["ok"] and h4["result"]["note"] == {"text": "rates checked, delete refused"}, h4
assert "example-token" not in sys.stdin.read()
print("example_http: the scenario holds")
'
case $out in *example-token*) echo "example_http: the token is in the results" >&2; exit 1 ;; esac
