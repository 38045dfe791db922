#!/usr/bin/python3
"""The pebble peer of bench/run: Python's ProcessPool with a per-call timeout.

    pebble_bench.py noop N WORKERS          no-op calls, timeout 5 s each
    pebble_bench.py hang N WORKERS MS       calls that never return, timeout MS
    pebble_bench.py echo N WORKERS BYTES    calls whose args ({"p": "xx..."}, BYTES of JSON) come back

Prints one JSON object on stdout.

noop: the clock runs from creating the pool to the pool joined, around N
calls of a function that returns {} submitted with schedule(timeout=5), the
same work toolpool's plugin `noop` does (toolpool's time includes its start
and its exit too).

hang: each call sleeps an hour in its worker. Its deadline is the moment
pebble starts the call's clock (pebble stamps the task when its worker
acknowledges it; this script wraps that method to note the time) plus the
timeout; its result time is when the future's done callback runs. The figure
is result minus deadline, in microseconds: the same span as toolpool's
attempt duration minus its timeout.
"""
import json
import sys
import time
from concurrent.futures import TimeoutError as FutureTimeout

import pebble.pool.process
from pebble import ProcessPool


def noop(args):
    return {}


def hang():
    time.sleep(3600)


def echo(args):
    return args


def bench_echo(n, workers, size):
    args = {"p": "x" * (size - len('{"p":""}'))}
    t0 = time.monotonic()
    with ProcessPool(max_workers=workers) as pool:
        futures = [pool.schedule(echo, args=(args,), timeout=5) for _ in range(n)]
        for f in futures:
            assert len(f.result()["p"]) == len(args["p"])
    secs = time.monotonic() - t0
    return {"calls": n, "workers": workers, "seconds": secs, "calls_per_s": n / secs}


def bench_noop(n, workers):
    t0 = time.monotonic()
    with ProcessPool(max_workers=workers) as pool:
        futures = [pool.schedule(noop, args=({},), timeout=5) for _ in range(n)]
        for f in futures:
            f.result()
    secs = time.monotonic() - t0
    return {"calls": n, "workers": workers, "seconds": secs, "calls_per_s": n / secs}


def bench_hang(n, workers, timeout_ms):
    armed = {}  # future -> when pebble started its clock
    task_start = pebble.pool.process.TaskManager.task_start

    def noted_task_start(self, task_id, worker_id):
        task_start(self, task_id, worker_id)
        armed[self.tasks[task_id].future] = time.monotonic()

    pebble.pool.process.TaskManager.task_start = noted_task_start
    done = {}
    timeouts = 0
    t0 = time.monotonic()
    with ProcessPool(max_workers=workers) as pool:
        futures = []
        for i in range(n):
            f = pool.schedule(hang, timeout=timeout_ms / 1000.0)
            f.add_done_callback(lambda f: done.__setitem__(f, time.monotonic()))
            futures.append(f)
        for f in futures:
            try:
                f.result()
            except FutureTimeout:
                timeouts += 1
    wall = time.monotonic() - t0
    late = sorted((done[f] - armed[f] - timeout_ms / 1000.0) * 1e6
                  for f in futures if f in armed)
    return {"calls": n, "workers": workers, "timeouts": timeouts, "seconds": wall,
            "late_us": late}


def main(argv):
    if len(argv) >= 4 and argv[1] == "noop":
        out = bench_noop(int(argv[2]), int(argv[3]))
    elif len(argv) >= 5 and argv[1] == "echo":
        out = bench_echo(int(argv[2]), int(argv[3]), int(argv[4]))
    elif len(argv) >= 5 and argv[1] == "hang":
        out = bench_hang(int(argv[2]), int(argv[3]), float(argv[4]))
    else:
        sys.stderr.write(__doc__)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
