#!/bin/sh
# Rate-limited on the first attempt (with a retry-after), fine on the next.
cat >/dev/null
if [ "${TOOLPOOL_ATTEMPT:-1}" = 1 ]; then
    printf '{"error": "RateLimited", "message": "429: slow down", "retry_after_ms": 1200}\n'
else
    printf '{"base": "EUR", "USD": 1.08, "GBP": 0.86}\n'
fi
