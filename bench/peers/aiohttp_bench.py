#!/usr/bin/python3
"""The asyncio peer of bench/run's http section: aiohttp's client, N GETs of
URL with at most IN_FLIGHT of them at once.

    aiohttp_bench.py URL N IN_FLIGHT

Prints one JSON object on stdout: calls, seconds, calls_per_s, in_flight.

One ClientSession, its connector allowed IN_FLIGHT connections (its default
is 100, which would cap the calls in flight below IN_FLIGHT), kept alive and
reused. An asyncio.Semaphore of IN_FLIGHT holds the calls in flight; every
call is a task of its own, all created at once, as a program would fan out
its calls. Each answer must be a 200 whose body parses as JSON: the same
work toolpool's http adapter does for a result. The clock runs from creating
the session to closing it (toolpool's includes its start and exit too).
"""
import asyncio
import json
import sys
import time

import aiohttp


async def call(session, sem, url):
    async with sem:
        async with session.get(url) as r:
            if r.status != 200:
                raise RuntimeError(f"GET {url}: HTTP {r.status}")
            return json.loads(await r.read())


async def bench(url, n, in_flight):
    t0 = time.monotonic()
    sem = asyncio.Semaphore(in_flight)
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        results = await asyncio.gather(*(call(session, sem, url) for _ in range(n)))
    secs = time.monotonic() - t0
    assert len(results) == n and all(isinstance(r, dict) for r in results)
    return {"calls": n, "seconds": secs, "calls_per_s": n / secs, "in_flight": in_flight,
            "aiohttp": aiohttp.__version__}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    url, n, in_flight = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(bench(url, n, in_flight))))


if __name__ == "__main__":
    main()
