#!/usr/bin/python3
"""The Celery peer of bench/run's service section: Celery 5 with Redis as
broker and result backend, a prefork pool of WORKERS processes with a time
limit of 5 s per task, and a client calling `noop.delay({}).get()` from
THREADS threads, each waiting for its answer before the next call.

    celery_bench.py N WORKERS THREADS

Redis (no persistence, on a Unix socket) and the worker are started in a
temp folder and stopped at the end. Prints one JSON object on stdout: calls,
seconds, calls_per_s, and the latency percentiles in microseconds. The
clock runs from the first call to the last answer, after a warm-up call.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pct(sorted_values, p):
    k = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(k) - 1]


def main(argv):
    n, workers, threads = int(argv[1]), int(argv[2]), int(argv[3])
    tmp = tempfile.mkdtemp(prefix="celery-bench-")
    sock = os.path.join(tmp, "redis.sock")
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", tmp, "--daemonize", "no",
             "--loglevel", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        env = dict(os.environ, CELERY_REDIS=f"redis+socket://{sock}", PYTHONPATH=HERE)
        os.environ.update(env)
        log = open(os.path.join(tmp, "worker.log"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "prefork",
             "--concurrency", str(workers), "--time-limit", "5", "--loglevel", "WARNING",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env=env, cwd=tmp, stdout=log, stderr=log, start_new_session=True))
        sys.path.insert(0, HERE)
        from celery_tasks import noop
        noop.delay({}).get(timeout=60)     # warm-up: the worker is up and connected

        per = n // threads
        lat = []
        errors = []
        lock = threading.Lock()
        start = threading.Barrier(threads + 1)

        def client():
            mine = []
            try:
                start.wait()
                for _ in range(per):
                    t = time.perf_counter()
                    noop.delay({}).get(timeout=30)
                    mine.append(time.perf_counter() - t)
            except Exception as e:  # noqa: BLE001 - reported in the JSON
                errors.append(repr(e))
            with lock:
                lat.extend(mine)

        ts = [threading.Thread(target=client) for _ in range(threads)]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.monotonic()
        for t in ts:
            t.join()
        secs = time.monotonic() - t0
        lat.sort()
        calls = len(lat)
        out = {"calls": calls, "workers": workers, "threads": threads, "seconds": secs,
               "calls_per_s": calls / secs, "errors": errors[:5],
               "p50_us": pct(lat, 50) * 1e6 if lat else None,
               "p99_us": pct(lat, 99) * 1e6 if lat else None}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if len(procs) > 1:
            # The worker's pool processes, should any outlive it.
            try:
                os.killpg(procs[1].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out), flush=True)
    # Celery's AsyncResult.__del__ would try to reach the stopped Redis at
    # exit, for minutes: leave without running it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
