#!/usr/bin/python3
"""The driver of bench/run: runs every benchmark once, prints toolpool's
figures beside its peers' with the ratios and the project's performance targets, and
writes the report, the figures and the plot to the output folder.

    /usr/bin/python3 bench/bench.py [--quick] [--out DIR] [BUILD_DIR]

Run it through bench/run, which installs the peers first.

Every toolpool run gets a fresh store in a scratch folder (under $TMPDIR),
except where a benchmark is about reusing one (resume, store growth). Its
wall time is taken around the whole process (start, workers, store, exit),
its peak RSS by /usr/bin/time -f %M, and its resident memory is also sampled
from /proc every 0.1 s to split the peak into anonymous memory (the heap) and
file pages (the store's memory map). Every run's output is checked: one
result line per call, each one ok (the hung calls: each one a Timeout).
"""
import argparse
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(HERE, "peers")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import toolpool_client  # noqa: E402

# Counts per benchmark: the full run (about 5 minutes on 2 cores) and --quick.
FULL = {
    "workers": [1, 2, 4, 8],
    "noop_durable": 100000, "noop_relaxed": 300000, "noop_pebble": 40000, "noop_workerpool": 30000,
    "noop_rounds": 5,
    "exec": 5000, "exec_parallel": 2000,
    "hang": 200, "hang_workerpool": 40, "hang_workers": 2,
    "memory": 1000000,
    "args_sizes": [10, 1000, 100000], "args_calls": {10: 20000, 1000: 20000, 100000: 1000},
    "growth_batches": 10, "growth_batch": 100000,
    "svc_py_calls": 40000, "svc_py_threads": 8, "svc_latency_calls": 2000,
    "svc_rounds": 3, "svc_wrk_seconds": 10, "svc_wrk_threads": 2, "svc_wrk_conns": 64,
    "svc_memory": 1000000, "svc_celery": 4000, "svc_celery_threads": 8,
    "payload_sizes": [10000, 100000, 1000000],
    "payload_calls": {10000: 5000, 100000: 1000, 1000000: 200},
    "payload_exec_calls": {10000: 2000, 100000: 1000, 1000000: 200},
    "mcp_seq": 2000, "mcp_conc": 20000, "mcp_lanes": 32, "mcp_rounds": 3, "mcp_held": 256, "triage": 100000,
    "mcp_shared_seq": 3000, "mcp_shared_conc": 20000, "mcp_shared_rounds": 5,
    "store": 1000000,
    "shard_calls": 1000000, "shards": 4, "merge_shards": 16, "merge_each": 62500,
    "http_calls": 10000, "http_in_flight": 256, "http_ms": 20, "http_rounds": 3, "http_xargs": 3000,
    "http_wrk_seconds": 3, "http_seq": 2000, "http_seq_rounds": 3, "http_curl_each": 300,
    "otlp_calls": 200000, "otlp_rounds": 9, "scoreboard_calls": 600000,
}
QUICK = {
    "workers": [1, 2, 4, 8],
    "noop_durable": 10000, "noop_relaxed": 10000, "noop_pebble": 5000, "noop_workerpool": 4000,
    "noop_rounds": 1,
    "exec": 500, "exec_parallel": 200,
    "hang": 20, "hang_workerpool": 6, "hang_workers": 2,
    "memory": 200000,
    "args_sizes": [10, 1000, 100000], "args_calls": {10: 2000, 1000: 2000, 100000: 100},
    "growth_batches": 4, "growth_batch": 20000,
    "svc_py_calls": 4000, "svc_py_threads": 8, "svc_latency_calls": 300,
    "svc_rounds": 1, "svc_wrk_seconds": 3, "svc_wrk_threads": 2, "svc_wrk_conns": 64,
    "svc_memory": 100000, "svc_celery": 1000, "svc_celery_threads": 8,
    "payload_sizes": [10000, 100000, 1000000],
    "payload_calls": {10000: 500, 100000: 100, 1000000: 20},
    "payload_exec_calls": {10000: 200, 100000: 100, 1000000: 20},
    "mcp_seq": 300, "mcp_conc": 2000, "mcp_lanes": 32, "mcp_rounds": 1, "mcp_held": 256, "triage": 100000,
    "mcp_shared_seq": 500, "mcp_shared_conc": 4000, "mcp_shared_rounds": 1,
    "store": 100000,
    "shard_calls": 100000, "shards": 4, "merge_shards": 16, "merge_each": 6250,
    "http_calls": 2000, "http_in_flight": 256, "http_ms": 20, "http_rounds": 1, "http_xargs": 500,
    "http_wrk_seconds": 1, "http_seq": 300, "http_seq_rounds": 1, "http_curl_each": 50,
    "otlp_calls": 50000, "otlp_rounds": 3, "scoreboard_calls": 200000,
}

# The project's performance targets.
NOOP_VS_PEBBLE = 15.0       # durable no-op calls/s against pebble's
NOOP_RELAXED_VS_PEBBLE = 20.0  # the same with --relaxed
EXEC_VS_XARGS = 2.0
EXEC_VS_PARALLEL = 5.0
PAYLOAD_VS_PEBBLE = 2.0     # durable echo calls/s at 100 KB and at 1 MB
MCP_SEQ_OVERHEAD = 1.2      # toolpool mcp's p50 over the direct path's, one call at a time
TRIAGE_S = 1.0             # `toolpool failures` over a store of 100,000 results
SHARD_VS_ONE = 0.90        # N shards run as N processes: total calls/s at least 90 % of one run's
MERGE_S = 10.0             # merge of 16 stores of 62,500 results: the store and the results file
MCP_HELD_KIB = 200 * 1024   # 256 calls in flight to one Node server: toolpool's processes and the server's
MCP_SHARED_CONC = 1.0      # 32 at once through one shared session, --relaxed: calls/s against the direct client's
MCP_SHARED_ADDED_US = 150.0  # one at a time through one shared session, --relaxed: p50 added to the direct path's
HANG_P99_US = 2000.0
HTTP_VS_AIOHTTP = 1.0       # http tools, 256 in flight: toolpool -j 2 against aiohttp
HTTP_VS_XARGS = 10.0        # the same against xargs -P256 curl
HTTP_ADDED_US = 200.0       # http, one call at a time: toolpool's p50 over curl's (connection reused)
RSS_LIMIT_KIB = 64 * 1024
RSS_FLAT = 1.10          # "flat": the 1M peak at most 10 % (or 1 MiB) above the 100k peak
RSS_FLAT_KIB = 1024
RESUME_US = 1.5
RESUME_RERUNS = 3        # a rerun takes under a second: the median of three
SVC_WRK_CALLS = 30000    # serve: no-op calls/s with wrk
SVC_VS_CELERY = 20.0     # serve (wrk) against Celery + Redis (its Python client)
SVC_ADDED_US = 300.0     # serve's added latency over a run co-process, p50
SVC_RSS_FLAT = 1.10      # serve's RSS: overall peak at most 10 % above the first 10 %'s

SECTIONS = ["noop", "exec", "hang", "memory", "resume", "args", "growth", "service", "payload", "mcp", "mcp_shared",
            "http", "triage", "shard", "store", "otlp", "scoreboard"]
OTLP_SLOWDOWN = 0.15     # no-op durable calls/s with trace export on: at most 15 % below off
SCOREBOARD_SLOWDOWN = 0.05  # ... with the scoreboard published (as always) against TOOLPOOL_SCOREBOARD=0

REPORT = []
SERVICES = []            # every serve started, stopped at the end whatever happens


def say(line=""):
    """Prints a report line and keeps it for report.txt."""
    print(line, flush=True)
    REPORT.append(line)


def verdict(ok):
    return "PASS" if ok else "MISS"


def fmt_int(x):
    return f"{x:,.0f}"


def pct(values, p):
    """Nearest-rank percentile of sorted values."""
    if not values:
        return float("nan")
    k = max(1, math.ceil(p / 100.0 * len(values)))
    return values[k - 1]


# ---------------------------------------------------------------------------
# The machine


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def steal_ms():
    """CPU time the hypervisor took from this machine's vCPUs so far (all of them)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    ticks = int(fields[8]) if len(fields) > 8 else 0
    return ticks * 1000.0 / os.sysconf("SC_CLK_TCK")


def fsync_us(folder, n=200):
    """Median time of a 4 KiB write plus fsync in folder: what a durable
    commit pays at least once."""
    path = os.path.join(folder, "fsync-probe")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    times = []
    try:
        block = b"x" * 4096
        for i in range(n):
            t0 = time.perf_counter()
            os.pwrite(fd, block, (i % 16) * 4096)
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return times[len(times) // 2]


def wake_us(cpus, n=2000):
    """Median round trip of a byte over two pipes between two processes
    pinned to cpus (the parent's, the child's): two wake-ups of a sleeping
    process, what each hop of a relay costs twice. None when a CPU cannot
    be had. On a VM whose idle vCPUs halt, a wake-up across vCPUs costs
    many times one on the same vCPU."""
    try:
        mine = os.sched_getaffinity(0)
        if not set(cpus) <= mine:
            return None
    except (AttributeError, OSError):
        return None
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {cpus[1]})
            os.close(a_w)
            os.close(b_r)
            for _ in range(n + 100):
                if not os.read(a_r, 1):
                    break
                os.write(b_w, b"x")
        finally:
            os._exit(0)
    os.close(a_r)
    os.close(b_w)
    times = []
    try:
        os.sched_setaffinity(0, {cpus[0]})
        for i in range(n + 100):
            t0 = time.perf_counter()
            os.write(a_w, b"x")
            os.read(b_r, 1)
            if i >= 100:  # the first ones warm up
                times.append((time.perf_counter() - t0) * 1e6)
    finally:
        os.sched_setaffinity(0, mine)
        os.close(a_w)
        os.close(b_r)
        os.waitpid(pid, 0)
    times.sort()
    return times[len(times) // 2]


def machine(scratch, build):
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
    mhz = sh("grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2-").strip()
    cache = sh("grep -m1 'cache size' /proc/cpuinfo | cut -d: -f2-").strip()
    if mhz:
        cpu += f" ({float(mhz):.0f} MHz{', ' + cache + ' cache' if cache else ''})"
    mem_kib = int(sh("awk '/MemTotal/ {print $2}' /proc/meminfo") or 0)
    df = sh(f"df -h --output=source,fstype,size,avail '{scratch}' | tail -1").split()
    disk = f"{df[0]} ({df[1]}, {df[2]}, {df[3]} free)" if len(df) >= 4 else "?"
    commit = sh(f"git -C '{ROOT}' rev-parse --short HEAD")
    dirty = sh(f"git -C '{ROOT}' status --porcelain --untracked-files=no -- . ':!bench' ':!docs'")
    built = time.strftime("%Y-%m-%d %H:%M UTC",
                          time.gmtime(os.path.getmtime(os.path.join(build, "toolpool"))))
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": f"{mem_kib / 1048576:.1f} GiB",
        "disk": disk,
        "scratch": scratch,
        "fsync_us": fsync_us(scratch),
        "wake_same_us": wake_us((0, 0)),
        "wake_apart_us": wake_us((0, 1)),
        "kernel": platform.release(),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
        "toolpool": (f"{build}/toolpool, built {built}; source tree at {commit}"
                     f"{' with uncommitted changes' if dirty else ''}"),
        "python": sh(f"{PYTHON} --version"),
        "pebble": sh(f"{PYTHON} -c 'import pebble; print(pebble.__version__)'"),
        "node": sh("node --version"),
        "workerpool": sh(f"node -p \"require('{HERE}/node_modules/workerpool/package.json').version\""),
        "parallel": sh("parallel --version 2>/dev/null | head -1"),
        "wrk": sh("wrk -v 2>&1 | head -1 | cut -d' ' -f1,2"),
        "celery": sh(f"{PYTHON} -c 'import celery; print(celery.__version__)'"),
        "redis": sh("redis-server --version | cut -d' ' -f3"),
        "xargs": sh("xargs --version | head -1"),
        "curl": sh("curl --version | head -1 | cut -d' ' -f1,2"),
        "aiohttp": sh(f"{PYTHON} -c 'import aiohttp; print(aiohttp.__version__)'"),
    }


# ---------------------------------------------------------------------------
# Running toolpool


def tree_memory(pid):
    """VmRSS and Pss (KiB) of pid and of every process under it: {pid: (rss, pss)}. A
    process's children are listed under the thread that forked them, so every thread's
    list is read."""
    out, todo = {}, [str(pid)]
    while todo:
        p = todo.pop()
        try:
            rss = pss = 0
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                        break
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss = int(line.split()[1])
                        break
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(f.read().split())
            out[p] = (rss, pss)
        except OSError:
            continue                # gone meanwhile
    return out


class Sampler(threading.Thread):
    """Polls /proc/PID/status of the process /usr/bin/time started, and keeps
    the highest RssAnon and RssFile seen. tree: also the highest sum of VmRSS
    (and of Pss) over it and every process under it (the supervisor and its
    workers), every 20 ms."""

    def __init__(self, time_pid, tree=False):
        super().__init__(daemon=True)
        self.time_pid = time_pid
        self.anon = 0
        self.file = 0
        self.tree = tree
        self.tree_rss = 0
        self.tree_pss = 0
        self.tree_procs = 0
        self.stop = threading.Event()

    def child(self):
        try:
            with open(f"/proc/{self.time_pid}/task/{self.time_pid}/children") as f:
                kids = f.read().split()
            return kids[0] if kids else None
        except OSError:
            return None

    def run(self):
        pid = None
        while not self.stop.is_set():
            pid = pid or self.child()
            if pid:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        for line in f:
                            if line.startswith("RssAnon:"):
                                self.anon = max(self.anon, int(line.split()[1]))
                            elif line.startswith("RssFile:"):
                                self.file = max(self.file, int(line.split()[1]))
                except OSError:
                    pass
                if self.tree:
                    mem = tree_memory(pid)
                    rss = sum(r for r, _ in mem.values())
                    if rss > self.tree_rss:
                        self.tree_rss, self.tree_procs = rss, len(mem)
                    self.tree_pss = max(self.tree_pss, sum(p for _, p in mem.values()))
            self.stop.wait(0.02 if self.tree else 0.1)


class Toolpool:
    def __init__(self, build, scratch):
        self.bin = os.path.join(build, "toolpool")
        self.plugin_registry = os.path.join(build, "examples", "tools.json")
        self.scratch = scratch
        self.n = 0

    def fresh(self, name):
        self.n += 1
        return os.path.join(self.scratch, f"{self.n:03d}-{name}")

    def run(self, calls, registry, workers, store, relaxed=False, expect="ok", tree=False, extra=(), env=None):
        """Runs `toolpool run` on the calls file and returns its figures.
        expect: "ok" (every call ok) or "Timeout" (every call timed out).
        tree: also the peak of the supervisor's and its workers' summed RSS."""
        out = store + ".out"
        rss = store + ".rss"
        cmd = ["/usr/bin/time", "-f", "%M", "-o", rss, self.bin, "run", "-q", "-j", str(workers),
               "--store", store, "-r", registry, "-o", out]
        if relaxed:
            cmd.append("--relaxed")
        cmd += list(extra)
        cmd.append(calls)
        settle()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env) if env else None)
        sampler = Sampler(p.pid, tree)
        sampler.start()
        _, err = p.communicate()
        secs = time.monotonic() - t0
        sampler.stop.set()
        sampler.join()
        with open(rss) as f:
            peak = int(f.read().split()[-1])
        with open(out, "rb") as f:
            data = f.read()
        lines = data.count(b"\n")
        want = count_lines(calls)
        good = data.count(b'"ok":true') if expect == "ok" else data.count(b'"error":"Timeout"')
        if lines != want or good != want:
            sys.exit(f"bench: toolpool {' '.join(cmd[5:])}: {lines} results, {good} {expect}, "
                     f"for {want} calls (exit {p.returncode}){': ' + err.strip() if err else ''}")
        r = {"calls": want, "workers": workers, "seconds": secs, "calls_per_s": want / secs,
             "rss_kib": peak, "anon_kib": sampler.anon, "file_kib": sampler.file,
             "relaxed": relaxed, "out": out}
        if tree:
            r.update(tree_rss_kib=sampler.tree_rss, tree_pss_kib=sampler.tree_pss, tree_procs=sampler.tree_procs)
        return r


def count_lines(path):
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def write_calls(path, n, tool, args="{}", prefix="c"):
    with open(path, "w") as f:
        for i in range(n):
            f.write(f'{{"id":"{prefix}{i}","tool":"{tool}","args":{args}}}\n')
    return path


def write_registry(path, tools):
    with open(path, "w") as f:
        json.dump({"tools": tools}, f)
    return path


# ---------------------------------------------------------------------------
# Running the peers


def settle():
    """Writes back what earlier runs left in the page cache, outside every clock: a run that
    writes (toolpool's output and store) would otherwise pay for the runs before it, while a
    peer that writes nothing would not."""
    os.sync()


def peer(cmd):
    settle()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def pebble(mode, n, workers, *rest):
    return peer([PYTHON, os.path.join(PEERS, "pebble_bench.py"), mode, str(n), str(workers),
                 *map(str, rest)])


def workerpool(mode, n, workers, *rest):
    return peer(["node", os.path.join(PEERS, "workerpool_bench.js"), mode, str(n), str(workers),
                 *map(str, rest)])


def shell_peer(cmd, n):
    """Times a shell pipeline fed n lines (seq 1 n)."""
    settle()
    t0 = time.monotonic()
    p = subprocess.run(f"seq 1 {n} | {cmd}", shell=True, capture_output=True, text=True)
    secs = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {cmd}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return {"calls": n, "seconds": secs, "calls_per_s": n / secs}


# ---------------------------------------------------------------------------
# Printing


def table(rows, ref_names):
    """rows: (name, figures); prints calls, seconds, calls/s and the ratio of
    each row's calls/s to each reference row's."""
    refs = [(r, dict(rows)[r]["calls_per_s"]) for r in ref_names]
    head = f"  {'':38} {'calls':>9} {'seconds':>8} {'calls/s':>9}"
    for r, _ in refs:
        head += f" {'vs ' + r.split()[0]:>14}"
    say(head)
    for name, f in rows:
        line = f"  {name:38} {fmt_int(f['calls']):>9} {f['seconds']:8.2f} {fmt_int(f['calls_per_s']):>9}"
        for _, v in refs:
            line += f" {f['calls_per_s'] / v:13.2f}x"
        say(line)


def target(text, value, ok):
    say(f"  target: {text:58} {value:>14}  {verdict(ok)}")


# ---------------------------------------------------------------------------
# The benchmarks


def bench_noop(tp, cfg, scratch, res):
    say(f"== 1. no-op in-worker calls, per-call timeout 5 s: calls/s at "
        f"-j {', '.join(map(str, cfg['workers']))} (the plot), then -j 2 side by side")
    sweep = {"toolpool": {}, "toolpool --relaxed": {}, "pebble": {}, "workerpool": {}}
    stolen, t0 = steal_ms(), time.monotonic()
    files = {}
    for key in ("noop_durable", "noop_relaxed"):
        files[key] = write_calls(os.path.join(scratch, f"{key}.jsonl"), cfg[key], "noop")
    for j in cfg["workers"]:
        sweep["toolpool"][j] = tp.run(files["noop_durable"], tp.plugin_registry, j,
                                      tp.fresh(f"noop-j{j}"))
        sweep["toolpool --relaxed"][j] = tp.run(files["noop_relaxed"], tp.plugin_registry, j,
                                                tp.fresh(f"noop-relaxed-j{j}"), relaxed=True)
        sweep["pebble"][j] = pebble("noop", cfg["noop_pebble"], j)
        sweep["workerpool"][j] = workerpool("noop", cfg["noop_workerpool"], j)
    res["noop"] = {k: {str(j): v for j, v in d.items()} for k, d in sweep.items()}

    say(f"  {'workers':38} " + " ".join(f"{'-j ' + str(j):>9}" for j in cfg["workers"]))
    for name, d in sweep.items():
        say(f"  {name:38} " + " ".join(f"{fmt_int(d[j]['calls_per_s']):>9}" for j in cfg["workers"]))
    say()
    # The comparison at -j 2: more rounds of toolpool and pebble, one after
    # the other, so a slow minute of the machine falls on both; the median
    # round of each is compared.
    rounds = {k: [sweep[k][2]] for k in ("toolpool", "toolpool --relaxed", "pebble")}
    for i in range(1, cfg["noop_rounds"]):
        rounds["pebble"].append(pebble("noop", cfg["noop_pebble"], 2))
        rounds["toolpool"].append(tp.run(files["noop_durable"], tp.plugin_registry, 2,
                                         tp.fresh(f"noop-j2-round{i}")))
        rounds["toolpool --relaxed"].append(tp.run(files["noop_relaxed"], tp.plugin_registry, 2,
                                                   tp.fresh(f"noop-relaxed-j2-round{i}"), relaxed=True))
    med = {k: sorted(v, key=lambda f: f["calls_per_s"])[len(v) // 2] for k, v in rounds.items()}
    res["noop_rounds"] = {k: [f["calls_per_s"] for f in v] for k, v in rounds.items()}
    rows = [("toolpool plugin noop (durable)", med["toolpool"]),
            ("toolpool plugin noop (--relaxed)", med["toolpool --relaxed"]),
            ("pebble ProcessPool.schedule(timeout=5)", med["pebble"]),
            ("workerpool process .timeout(5000)", sweep["workerpool"][2])]
    n = cfg["noop_rounds"]
    say(f"  -j 2" + (f", the median of {n} rounds (calls/s of each round: "
                     + "; ".join(f"{k} " + " ".join(fmt_int(f["calls_per_s"]) for f in v)
                                 for k, v in rounds.items()) + ")" if n > 1 else "") + ":")
    table(rows, ["pebble ProcessPool.schedule(timeout=5)", "workerpool process .timeout(5000)"])
    stolen, secs = steal_ms() - stolen, time.monotonic() - t0
    say(f"  steal time during this section: {stolen:.0f} ms of {secs * os.cpu_count() * 1000:.0f} ms of vCPU time")
    res["noop_steal_ms"] = stolen
    r = med["toolpool"]["calls_per_s"] / med["pebble"]["calls_per_s"]
    rr = med["toolpool --relaxed"]["calls_per_s"] / med["pebble"]["calls_per_s"]
    target(f"no-op calls (durable) >= {NOOP_VS_PEBBLE:.0f}x pebble", f"{r:.2f}x", r >= NOOP_VS_PEBBLE)
    target(f"  (the same with --relaxed) >= {NOOP_RELAXED_VS_PEBBLE:.0f}x pebble", f"{rr:.2f}x",
           rr >= NOOP_RELAXED_VS_PEBBLE)
    res["targets"]["noop_vs_pebble"] = {"value": r, "relaxed": rr,
                                        "pass": r >= NOOP_VS_PEBBLE and rr >= NOOP_RELAXED_VS_PEBBLE}
    say()
    return sweep


class OtlpReceiver:
    """A local OTLP/HTTP receiver (http.server in a thread, HTTP/1.1 so that
    the exporter keeps its connection, as with a collector): takes every
    POST /v1/traces and counts its spans as it comes, keeping no body but
    the first of each round. A span is counted by its gen_ai.tool.name
    attribute, found with bytes.count (C speed): every call's span and every
    attempt's has one, and the no-op calls here have no backoff, whose span
    has none. Keeping every body for a count after the round, as this bench
    once did, grew the receiver by about 60 MB a round, and that alone cost
    the run it measured about 10 % (alternated, same build). The first body
    of each round is walked field by field after the round (count_spans),
    and its count must agree with the quick one."""

    SIGNATURE = {"application/json": b'"key":"gen_ai.tool.name"',
                 # KeyValue.key (field 1, 16 bytes) as protobuf writes it
                 "application/x-protobuf": b"\x0a\x10gen_ai.tool.name"}

    def __init__(self):
        import http.server
        recv = self
        self.spans = 0
        self.first = None
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the answer's header and body go out at once, not 40 ms apart

            def do_POST(self):
                ctype = self.headers.get("Content-Type")
                body = self.rfile.read(int(self.headers["Content-Length"]))
                n = body.count(OtlpReceiver.SIGNATURE.get(ctype, b"\0none"))
                with recv.lock:
                    recv.spans += n
                    if recv.first is None:
                        recv.first = (ctype, body, n)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count_spans(self):
        """The spans received since the last count; the first body's quick
        count checked against its spans walked (JSON: its "spanId" keys;
        protobuf: the Span fields of each ScopeSpans)."""
        with self.lock:
            n, first = self.spans, self.first
            self.spans, self.first = 0, None
        if first:
            ctype, body, quick = first
            if ctype == "application/json":
                walked = body.count(b'"spanId"')
            else:
                walked = sum(1 for f, v in pb_walk(body) if f == 1
                             for g, w in pb_walk(v) if g == 2 for h, _ in pb_walk(w) if h == 2)
            if walked != quick:
                raise RuntimeError(f"otlp receiver: a body of {walked} spans was counted {quick}")
        return n

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def pb_walk(buf):
    """The length-delimited fields of a protobuf message: (number, bytes); others skipped."""
    i = 0

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = varint()
        wt = key & 7
        if wt == 0:
            varint()
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            n = varint()
            yield key >> 3, buf[i:i + n]
            i += n


OTLP_MODES = (("off", ()), ("protobuf", ("--otlp-protocol", "http/protobuf")),
              ("json", ("--otlp-protocol", "http/json")))


def bench_otlp(tp, cfg, scratch, res):
    n, rounds = cfg["otlp_calls"], cfg["otlp_rounds"]
    say(f"== otlp. no-op durable calls/s at -j 2, trace export off, over http/protobuf and over http/json "
        f"(--otlp to a local receiver), {n} calls, the median of {rounds} rounds of each, alternated")
    calls = os.path.join(scratch, "otlp.jsonl")
    write_calls(calls, n, "noop")
    recv = OtlpReceiver()
    runs = {m: [] for m, _ in OTLP_MODES}
    try:
        for i in range(rounds):
            for mode, args in OTLP_MODES:
                extra = ("--otlp", recv.url) + args if mode != "off" else ()
                f = tp.run(calls, tp.plugin_registry, 2, tp.fresh(f"otlp-{mode}-{i}"), extra=extra)
                f["spans"] = recv.count_spans()
                runs[mode].append(f)
    finally:
        recv.close()
    med = {m: sorted(r, key=lambda f: f["calls_per_s"])[len(r) // 2]["calls_per_s"] for m, r in runs.items()}
    # Each round's ratio to the off run beside it, and their median: a machine whose speed drifts
    # from round to round (rounds of one mode here spread by up to 2x) moves both runs of a pair.
    paired = {m: statistics.median(f["calls_per_s"] / o["calls_per_s"] for f, o in zip(runs[m], runs["off"]))
              for m in runs if m != "off"}
    for mode, _ in OTLP_MODES:
        line = (f"  {mode + ':':<10}{fmt_int(med[mode]):>9} calls/s  (rounds: "
                + " ".join(fmt_int(f["calls_per_s"]) for f in runs[mode]) + ")")
        if mode != "off":
            line += (f"  {paired[mode]:.2f}x off (median of the rounds' ratios; {med[mode] / med['off']:.2f}x "
                     f"of the medians); spans received per round: "
                     + " ".join(fmt_int(f["spans"]) for f in runs[mode]) + f" of {fmt_int(2 * n)}")
        say(line)
    slower = 1 - paired["protobuf"]
    slower_json = 1 - paired["json"]
    target(f"export on (http/protobuf, the default) at most {OTLP_SLOWDOWN * 100:.0f} % slower",
           f"{slower * 100:.1f} %", slower <= OTLP_SLOWDOWN)
    say(f"  (http/json: {slower_json * 100:.1f} % slower)")
    res["otlp"] = {m: [f["calls_per_s"] for f in r] for m, r in runs.items()}
    res["otlp"]["spans"] = {m: [f["spans"] for f in r] for m, r in runs.items() if m != "off"}
    res["targets"]["otlp"] = {"value": slower, "json": slower_json, "pass": slower <= OTLP_SLOWDOWN}
    say()


def bench_scoreboard(tp, cfg, scratch, res):
    """The scoreboard's cost on the no-op path: the same run with the board
    in shared memory (as always), the same read by `toolpool top --once
    --json` five times a second, and the board in the process's own memory,
    unpublished (TOOLPOOL_SCOREBOARD=0); in rotation. What it counts, it
    counts in all three: against a build without it, see bench/compare."""
    n, rounds = cfg["scoreboard_calls"], cfg["otlp_rounds"]
    say(f"== scoreboard. no-op durable calls/s at -j 2, the scoreboard published (memfd), published and read "
        f"by top 5 times a second, and private (TOOLPOOL_SCOREBOARD=0), {n} calls, the median of {rounds} "
        f"rounds of each, in rotation")
    calls = os.path.join(scratch, "scoreboard.jsonl")
    write_calls(calls, n, "noop")
    runs = {"private": [], "published": [], "read by top": []}
    names = list(runs)
    for i in range(rounds):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            store = tp.fresh(f"board-{name.replace(' ', '-')}-{i}")
            stop = threading.Event()
            reads = [0]

            def reader():
                while not stop.wait(0.2):
                    if os.path.exists(store):
                        subprocess.run([tp.bin, "top", "--once", "--json", "--store", store],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        reads[0] += 1
            th = threading.Thread(target=reader) if name == "read by top" else None
            if th:
                th.start()
            try:
                runs[name].append(tp.run(calls, tp.plugin_registry, 2, store,
                                         env={"TOOLPOOL_SCOREBOARD": "0"} if name == "private" else None))
            finally:
                stop.set()
                if th:
                    th.join()
            runs[name][-1]["reads"] = reads[0]
    med = {k: sorted(v, key=lambda f: f["calls_per_s"])[len(v) // 2] for k, v in runs.items()}
    for k, v in runs.items():
        say(f"  {k + ':':13} {fmt_int(med[k]['calls_per_s'])} calls/s  (rounds: "
            + " ".join(fmt_int(f["calls_per_s"]) for f in v) + ")"
            + (f"; top read it {', '.join(str(f['reads']) for f in v)} times" if k == "read by top" else ""))
    slower = 1 - med["published"]["calls_per_s"] / med["private"]["calls_per_s"]
    read = 1 - med["read by top"]["calls_per_s"] / med["published"]["calls_per_s"]
    target(f"published at most {SCOREBOARD_SLOWDOWN * 100:.0f} % slower than private", f"{slower * 100:.1f} %",
           slower <= SCOREBOARD_SLOWDOWN)
    say(f"  read by top against published: {read * 100:.1f} % slower")
    res["scoreboard"] = {k: [f["calls_per_s"] for f in v] for k, v in runs.items()}
    res["targets"]["scoreboard"] = {"value": slower, "read": read, "pass": slower <= SCOREBOARD_SLOWDOWN}
    say()


def bench_exec(tp, cfg, scratch, res):
    n, np_ = cfg["exec"], cfg["exec_parallel"]
    say(f"== 2. exec tools: /bin/true per call, timeout 5 s, 2 at a time")
    reg = write_registry(os.path.join(scratch, "exec.json"),
                         [{"name": "t", "exec": ["/bin/true"], "timeout": "5s"}])
    calls = write_calls(os.path.join(scratch, "exec.jsonl"), n, "t")
    rows = [
        ("toolpool exec /bin/true (durable)", tp.run(calls, reg, 2, tp.fresh("exec"))),
        ("toolpool exec /bin/true (--relaxed)", tp.run(calls, reg, 2, tp.fresh("exec-relaxed"),
                                                      relaxed=True)),
        ("xargs -P2 -n1 timeout 5 true", shell_peer("xargs -P2 -n1 timeout 5 true", n)),
        ("parallel --timeout 5 -j2 true", shell_peer("parallel --timeout 5 -j2 true", np_)),
    ]
    table(rows, ["xargs -P2 -n1 timeout 5 true", "parallel --timeout 5 -j2 true"])
    d = dict(rows)
    tpd, tpr = d["toolpool exec /bin/true (durable)"], d["toolpool exec /bin/true (--relaxed)"]
    rx = tpd["calls_per_s"] / d["xargs -P2 -n1 timeout 5 true"]["calls_per_s"]
    rp = tpd["calls_per_s"] / d["parallel --timeout 5 -j2 true"]["calls_per_s"]
    rxr = tpr["calls_per_s"] / d["xargs -P2 -n1 timeout 5 true"]["calls_per_s"]
    rpr = tpr["calls_per_s"] / d["parallel --timeout 5 -j2 true"]["calls_per_s"]
    target(f"exec (durable) >= {EXEC_VS_XARGS:.0f}x xargs -P2 timeout", f"{rx:.2f}x", rx >= EXEC_VS_XARGS)
    target(f"exec (durable) >= {EXEC_VS_PARALLEL:.0f}x GNU parallel", f"{rp:.2f}x", rp >= EXEC_VS_PARALLEL)
    target(f"  (--relaxed) >= {EXEC_VS_XARGS:.0f}x xargs -P2 timeout", f"{rxr:.2f}x", rxr >= EXEC_VS_XARGS)
    target(f"  (--relaxed) >= {EXEC_VS_PARALLEL:.0f}x GNU parallel", f"{rpr:.2f}x", rpr >= EXEC_VS_PARALLEL)
    res["exec"] = {k: v for k, v in rows}
    res["targets"]["exec_vs_xargs"] = {"value": rx, "relaxed": rxr, "pass": rx >= EXEC_VS_XARGS}
    res["targets"]["exec_vs_parallel"] = {"value": rp, "relaxed": rpr, "pass": rp >= EXEC_VS_PARALLEL}
    say()


def hang_line(name, late, secs, n, workers):
    ideal = n * 0.2 / workers
    say(f"  {name:32} {len(late):>5} {late[len(late) // 2] / 1e3:9.2f} {pct(late, 99) / 1e3:9.2f} "
        f"{late[-1] / 1e3:9.2f} {late[0] / 1e3:9.2f} {secs:8.1f} {ideal:8.1f}")


def bench_hang(tp, cfg, scratch, res):
    n, nw, j = cfg["hang"], cfg["hang_workerpool"], cfg["hang_workers"]
    say(f"== 3. hung calls: never return, timeout 200 ms, 1 attempt, -j {j}: "
        f"deadline to result (ms)")
    # The breakers are set out of reach: 200 failures of one tool would
    # otherwise open its circuit, and the calls after it would not run.
    reg = write_registry(os.path.join(scratch, "hang.json"), [{
        "name": "hang", "exec": ["/bin/sleep", "3600"], "timeout": "200ms", "attempts": 1,
        "breaker": {"same_call": {"failures": 1000000}, "tool": {"min_calls": 1000000}}}])
    calls = write_calls(os.path.join(scratch, "hang.jsonl"), n, "hang")
    stolen = steal_ms()
    r = tp.run(calls, reg, j, tp.fresh("hang"), expect="Timeout")
    stolen = steal_ms() - stolen
    late = []
    with open(r["out"]) as f:
        for line in f:
            late.append((json.loads(line)["trace"][0]["duration_ms"] - 200.0) * 1e3)
    late.sort()
    pb = pebble("hang", n, j, 200)
    wp = workerpool("hang", nw, j, 200)
    say(f"  {'':32} {'calls':>5} {'median':>9} {'p99':>9} {'max':>9} {'min':>9} "
        f"{'wall s':>8} {'ideal s':>8}")
    hang_line("toolpool exec /bin/sleep 3600", late, r["seconds"], n, j)
    hang_line("pebble (time.sleep(3600))", pb["late_us"], pb["seconds"], n, j)
    hang_line("workerpool (Atomics.wait 1 h)", wp["late_us"], wp["seconds"], nw, j)
    say("  (toolpool: trace duration_ms - 200, attempt start to SIGSTOP sent to the worker group (the kill "
        "follows), before the commit and the result line; peers: the library's own timer start + 200 ms to the "
        "future/promise reporting the timeout; ideal s: calls x 0.2 s / workers)")
    early = [(nm, [x for x in v if x < 0]) for nm, v in
             (("toolpool", late), ("pebble", pb["late_us"]), ("workerpool", wp["late_us"]))]
    say("  ended before the deadline (a negative figure: the kill or the report came early): "
        + ", ".join(f"{nm} {len(v)}" + (f" (earliest {v[0] / 1e3:.2f} ms)" if v else "")
                    for nm, v in early))
    say(f"  steal time during the toolpool run: {stolen:.0f} ms of {r['seconds'] * os.cpu_count() * 1000:.0f} ms "
        f"of vCPU time (time the hypervisor gave to something else: whatever was to run "
        f"on a vCPU then, the supervisor included, waited)")
    p99 = pct(late, 99)
    say(f"  p99 ratios: pebble/toolpool {pct(pb['late_us'], 99) / p99:.1f}x, "
        f"workerpool/toolpool {pct(wp['late_us'], 99) / p99:.2f}x")
    target(f"hung-call deadline to result, p99 <= {HANG_P99_US / 1e3:.0f} ms",
           f"{p99 / 1e3:.2f} ms", p99 <= HANG_P99_US)
    res["hang"] = {"toolpool": {"late_us": late, "seconds": r["seconds"], "calls": n, "steal_ms": stolen},
                   "pebble": pb, "workerpool": wp, "workers": j}
    res["targets"]["hang_p99"] = {"value_us": p99, "pass": p99 <= HANG_P99_US}
    say()


def bench_memory(tp, cfg, scratch, res, at_100k):
    n = cfg["memory"]
    say(f"== 4. memory: supervisor peak RSS (/usr/bin/time -f %M), no-op calls, -j 2, durable")
    calls = write_calls(os.path.join(scratch, "memory.jsonl"), n, "noop")
    r = tp.run(calls, tp.plugin_registry, 2, tp.fresh("memory"))
    os.unlink(r["out"])
    os.unlink(calls)
    say(f"  {'calls':>12} {'seconds':>8} {'calls/s':>9} {'peak RSS':>10} {'of it: heap':>12} "
        f"{'store map':>10}")
    for f in (at_100k, r):
        say(f"  {fmt_int(f['calls']):>12} {f['seconds']:8.2f} {fmt_int(f['calls_per_s']):>9} "
            f"{f['rss_kib'] / 1024:7.1f} MiB {f['anon_kib'] / 1024:8.1f} MiB {f['file_kib'] / 1024:6.1f} MiB")
    say("  (heap: the highest RssAnon seen; store map: the highest RssFile, mostly the LMDB "
        "map's pages, which the kernel can drop)")
    ok_limit = r["rss_kib"] < RSS_LIMIT_KIB
    flat = r["rss_kib"] <= max(at_100k["rss_kib"] * RSS_FLAT, at_100k["rss_kib"] + RSS_FLAT_KIB)
    target(f"peak RSS through {fmt_int(n)} calls < 64 MiB", f"{r['rss_kib'] / 1024:.1f} MiB",
           ok_limit)
    target(f"flat: peak at {fmt_int(n)} <= {RSS_FLAT:.2f}x (or +1 MiB) peak at {fmt_int(at_100k['calls'])}",
           f"{r['rss_kib'] / at_100k['rss_kib']:.2f}x", flat)
    heap_flat = r["anon_kib"] <= at_100k["anon_kib"] * RSS_FLAT
    say(f"  (heap alone: {at_100k['anon_kib'] / 1024:.1f} MiB -> {r['anon_kib'] / 1024:.1f} MiB, "
        f"{'flat' if heap_flat else 'growing'})")
    res["memory"] = {"at_100k": at_100k, "at_n": r}
    res["targets"]["rss"] = {"value_kib": r["rss_kib"], "ratio": r["rss_kib"] / at_100k["rss_kib"],
                             "pass": ok_limit and flat}
    say()


def bench_resume(tp, cfg, scratch, res, runs):
    say(f"== 5. resume: the same command rerun on the store of a finished run, -j 2, "
        f"{RESUME_RERUNS} reruns")
    say(f"  {'first run':38} {'calls':>9} {'first s':>8} {'reruns s':>20} {'median us/call':>15}")
    out = {}
    for name, (calls, r) in runs.items():
        store = r["out"][:-len(".out")]
        secs = sorted(tp.run(calls, tp.plugin_registry, 2, store, relaxed=r["relaxed"])["seconds"]
                      for _ in range(RESUME_RERUNS))
        med = secs[len(secs) // 2]
        us = med / r["calls"] * 1e6
        say(f"  {name:38} {fmt_int(r['calls']):>9} {r['seconds']:8.2f} "
            f"{' '.join(f'{x:.2f}' for x in secs):>20} {us:15.2f}")
        out[name] = {"calls": r["calls"], "seconds": secs, "us_per_call": us}
    first = next(iter(out))  # the default: durable
    us = out[first]["us_per_call"]
    target(f"resume < {RESUME_US:.1f} us per recorded call ({first})",
           f"{us:.2f} us", us < RESUME_US)
    res["resume"] = out
    res["targets"]["resume"] = {"value_us": us, "pass": us < RESUME_US}
    say()


def bench_args(tp, cfg, scratch, res):
    say("== 6a. scaling with argument size: plugin `echo` (the args go to the worker and come "
        "back), durable; calls/s")
    say(f"  {'args bytes':>12} {'calls':>8} " + " ".join(f"{'-j ' + str(j):>9}" for j in cfg["workers"])
        + f" {'args MiB/s -j 2':>16}")
    out = {}
    for size in cfg["args_sizes"]:
        n = cfg["args_calls"][size]
        args = json.dumps({"p": "x" * (size - len('{"p":""}'))}, separators=(",", ":"))
        assert len(args) == size
        calls = write_calls(os.path.join(scratch, f"args{size}.jsonl"), n, "echo", args)
        row = {}
        for j in cfg["workers"]:
            r = tp.run(calls, tp.plugin_registry, j, tp.fresh(f"args{size}-j{j}"))
            os.unlink(r["out"])
            shutil.rmtree(r["out"][:-len(".out")])
            row[j] = r
        mib = row[2]["calls_per_s"] * size / 1048576 if 2 in row else 0
        say(f"  {fmt_int(size):>12} {fmt_int(n):>8} "
            + " ".join(f"{fmt_int(row[j]['calls_per_s']):>9}" for j in cfg["workers"])
            + f" {mib:16.2f}")
        out[str(size)] = {str(j): v for j, v in row.items()}
        os.unlink(calls)
    res["args"] = out
    say()


def bench_growth(tp, cfg, scratch, res):
    k, n = cfg["growth_batches"], cfg["growth_batch"]
    say(f"== 6b. scaling as the store grows to {fmt_int(k * n)} results: batches of "
        f"{fmt_int(n)} new no-op calls into one store, -j 2, durable")
    store = tp.fresh("growth")
    rates = []
    say(f"  {'results before':>15} {'calls/s':>9} {'peak RSS':>10} {'store size':>11}")
    for b in range(k):
        calls = write_calls(os.path.join(scratch, "growth.jsonl"), n, "noop", prefix=f"g{b}-")
        r = tp.run(calls, tp.plugin_registry, 2, store)
        size = sum(os.path.getsize(os.path.join(store, f)) for f in os.listdir(store))
        say(f"  {fmt_int(b * n):>15} {fmt_int(r['calls_per_s']):>9} {r['rss_kib'] / 1024:6.1f} MiB "
            f"{size / 1048576:7.0f} MiB")
        rates.append({"before": b * n, "calls_per_s": r["calls_per_s"], "rss_kib": r["rss_kib"],
                      "store_bytes": size})
    say(f"  last batch / first batch: {rates[-1]['calls_per_s'] / rates[0]['calls_per_s']:.2f}x")
    res["growth"] = rates
    say()


# ---------------------------------------------------------------------------
# 7. The service: toolpool serve


class Service:
    """One `toolpool serve` with a fresh store, at listen ("unix:PATH" or
    "127.0.0.1:PORT"), its resident memory and open descriptors sampled from
    /proc every 0.1 s from start to stop."""

    def __init__(self, tp, name, listen, workers=2, extra=()):
        self.store = tp.fresh(name)
        self.listen = listen
        self.log = self.store + ".log"
        self.cmd = [tp.bin, "serve", "--registry", tp.plugin_registry, "--store", self.store,
                    "-j", str(workers), "--listen", listen, *extra]
        self.samples = []           # (monotonic s, VmRSS KiB, RssAnon KiB, RssFile KiB, fds)
        self.stopping = threading.Event()
        self.sampler = None

    def start(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        SERVICES.append(self)
        c = toolpool_client.Client(self.listen, retries=0, timeout=5)
        end = time.monotonic() + 30
        while not c.ready():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.proc.kill()
                with open(self.log) as f:
                    sys.exit(f"bench: {' '.join(self.cmd)}: not ready (exit {self.proc.poll()}): "
                             f"{f.read()[-2000:]}")
            time.sleep(0.02)
        c.close()
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()
        return self

    def sample(self):
        pid = self.proc.pid
        while not self.stopping.is_set():
            row = [time.monotonic(), 0, 0, 0, 0]
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        for i, key in ((1, "VmRSS:"), (2, "RssAnon:"), (3, "RssFile:")):
                            if line.startswith(key):
                                row[i] = int(line.split()[1])
                row[4] = len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                break
            self.samples.append(tuple(row))
            self.stopping.wait(0.1)

    def stop(self):
        self.stopping.set()
        if self.sampler:
            self.sampler.join()
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def py_clients(addr, n, threads):
    """n no-op calls from `threads` threads sharing one client, each call
    waiting for its answer: calls/s and the latencies (s), sorted."""
    c = toolpool_client.Client(addr)
    per = n // threads
    lat, bad, errors = [], [], []
    start = threading.Barrier(threads + 1)
    lock = threading.Lock()

    def worker():
        mine = []
        try:
            start.wait()
            for _ in range(per):
                t = time.perf_counter()
                r = c.call("noop")
                mine.append(time.perf_counter() - t)
                if not r["ok"]:
                    bad.append(r)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    c.close()
    if errors or bad or len(lat) != per * threads:
        sys.exit(f"bench: Python client: {len(lat)} answers of {per * threads}, {len(bad)} not ok, "
                 f"errors: {errors[:3]} {bad[:1]}")
    lat.sort()
    return {"calls": len(lat), "seconds": secs, "calls_per_s": len(lat) / secs, "threads": threads,
            "p50_us": pct(lat, 50) * 1e6, "p99_us": pct(lat, 99) * 1e6}


def one_at_a_time(tp, addr, n, relaxed=False):
    """Sequential no-op calls, alternately through a `toolpool run -`
    co-process and through serve at addr, so each pair sees the same moment
    of the machine: the latencies (us) of each and the pairs' differences,
    each sorted."""
    c = toolpool_client.Client(addr)
    cp = toolpool_client.Coprocess(tp.bin, registry=tp.plugin_registry, store=tp.fresh("coprocess"),
                                   workers=2, args=["--relaxed"] if relaxed else [])
    direct, served = [], []
    for i in range(n + 50):         # the first 50 of each warm up
        t = time.perf_counter()
        r1 = cp.call("noop")
        t1 = time.perf_counter()
        r2 = c.call("noop")
        t2 = time.perf_counter()
        if not (r1["ok"] and r2["ok"]):
            sys.exit(f"bench: sequential calls: {r1} {r2}")
        if i >= 50:
            direct.append((t1 - t) * 1e6)
            served.append((t2 - t1) * 1e6)
    cp.close()
    c.close()
    return sorted(direct), sorted(served), sorted(b - a for a, b in zip(direct, served))


def run_wrk(url, cfg, prefix, seconds, quota=0, stop_when=None):
    """wrk with bench/wrk_calls.lua against url; returns the figures its
    done() prints. stop_when: polled every 0.5 s; when true, wrk gets SIGINT
    (it stops and reports)."""
    cmd = ["wrk", f"-t{cfg['svc_wrk_threads']}", f"-c{cfg['svc_wrk_conns']}", f"-d{seconds}s",
           "--timeout", "10s", "-s", os.path.join(HERE, "wrk_calls.lua"), url, "--", prefix, str(quota)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_when:
        while p.poll() is None:
            try:
                p.wait(0.5)
            except subprocess.TimeoutExpired:
                if stop_when():
                    p.send_signal(signal.SIGINT)
                    break
    out, err = p.communicate()
    secs = time.monotonic() - t0
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if p.returncode != 0 or not last.startswith("{"):
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}: {err.strip()[-1000:]} {out[-1000:]}")
    f = json.loads(last)
    f["wall_s"] = secs
    f["seconds"] = f["duration_us"] / 1e6
    f["calls_per_s"] = f["requests"] / f["seconds"]
    f["calls"] = f["requests"]
    f["issued"] = [int(x) for x in f["issued"]]
    return f


def check_ran(addr, prefix, issued, per_thread=50):
    """Asks serve for calls wrk posted, spread over each thread's ids: each
    must have run (ok, one attempt). Returns how many were checked."""
    c = toolpool_client.Client(addr)
    checked = 0
    for t, n in enumerate(issued, 1):
        # wrk calls the first thread's request() once to check the script,
        # without sending: its id 1 never reaches serve. The last ones may
        # have been cut off when wrk stopped.
        top = max(2, n - 1000)
        for k in sorted({2 + (top - 2) * i // max(1, per_thread - 1) for i in range(per_thread)}):
            r = c.result(f"{prefix}-{t}-{k}", wait=True, timeout=30)
            if not (r["ok"] and r["attempts"] == 1 and r["tool"] == "noop"):
                sys.exit(f"bench: wrk's call {prefix}-{t}-{k}: {r}")
            checked += 1
    c.close()
    return checked


def wrk_errors(f):
    return sum(f["errors"].values())


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def median_round(rounds):
    return sorted(rounds, key=lambda f: f["calls_per_s"])[len(rounds) // 2]


def bench_service(tp, cfg, scratch, res):
    j = 2
    say(f"== 7. the service: toolpool serve, no-op plugin calls (durable), -j {j}; "
        f"HTTP/1.1 keep-alive")
    out = {}
    stolen, t0, load0 = steal_ms(), time.monotonic(), loadavg()
    # wrk over TCP on the loopback and the Python client over the Unix
    # socket, in alternating rounds (a slow minute of the machine falls on
    # both), each on a serve of its own; then one call at a time.
    port = free_port()
    svc_tcp = Service(tp, "serve-tcp", f"127.0.0.1:{port}", j).start()
    svc_unix = Service(tp, "serve-unix", f"unix:{os.path.join(scratch, 'serve.sock')}", j).start()
    wrks, pys = [], []
    for r in range(cfg["svc_rounds"]):
        w = run_wrk(f"http://127.0.0.1:{port}", cfg, f"wrk{r}", cfg["svc_wrk_seconds"])
        w["checked"] = check_ran(svc_tcp.listen, f"wrk{r}", w["issued"])
        wrks.append(w)
        pys.append(py_clients(svc_unix.listen, cfg["svc_py_calls"], cfg["svc_py_threads"]))
    durable = one_at_a_time(tp, svc_unix.listen, cfg["svc_latency_calls"])
    svc_tcp.stop()
    svc_unix.stop()
    # The same without fsync, on both sides: a commit's disk time is the
    # same work in both paths, the largest part of a call and its noisiest
    # (an fsync took 0.13 to 2 ms in minutes of the same hour), and it would
    # drown the difference the service makes.
    svc_relaxed = Service(tp, "serve-relaxed", f"unix:{os.path.join(scratch, 'relaxed.sock')}", j,
                          ["--relaxed"]).start()
    relaxed = one_at_a_time(tp, svc_relaxed.listen, cfg["svc_latency_calls"], relaxed=True)
    svc_relaxed.stop()
    wrk, py = median_round(wrks), median_round(pys)
    # Celery, the peer.
    cel = peer([PYTHON, os.path.join(PEERS, "celery_bench.py"), str(cfg["svc_celery"]), str(j),
                str(cfg["svc_celery_threads"])])
    if cel["errors"] or cel["calls"] == 0:
        sys.exit(f"bench: celery: {cel}")

    n = cfg["svc_rounds"]
    if n > 1:
        say(f"  wrk and the Python client: the median of {n} alternating rounds (calls/s of each round: "
            f"wrk {' '.join(fmt_int(f['calls_per_s']) for f in wrks)}; "
            f"Python {' '.join(fmt_int(f['calls_per_s']) for f in pys)})")
    say(f"  {'':48} {'calls':>9} {'seconds':>8} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'vs Celery':>10}")
    rows = [
        (f"toolpool, wrk -t{cfg['svc_wrk_threads']} -c{cfg['svc_wrk_conns']}, TCP 127.0.0.1", wrk,
         wrk["latency_us"]["p50"], wrk["latency_us"]["p99"]),
        (f"toolpool, Python client, {py['threads']} threads, Unix socket", py, py["p50_us"], py["p99_us"]),
        (f"Celery + Redis, prefork {j}, Python, {cel['threads']} threads", cel, cel["p50_us"],
         cel["p99_us"]),
    ]
    for name, f, p50, p99 in rows:
        say(f"  {name:48} {fmt_int(f['calls']):>9} {f['seconds']:8.2f} {fmt_int(f['calls_per_s']):>9} "
            f"{p50 / 1e3:8.2f} {p99 / 1e3:8.2f} {f['calls_per_s'] / cel['calls_per_s']:9.2f}x")
    say(f"  (wrk: {sum(wrk_errors(f) for f in wrks)} errors; "
        f"{sum(f['checked'] for f in wrks)} of its calls asked for by id afterwards, each ok after "
        f"1 attempt. Python clients: each thread calls and waits, toolpool_client's call(), "
        f"Celery's noop.delay({{}}).get(). Celery's Redis keeps no file: its results are not "
        f"durable; toolpool's are committed with fsync before they are answered)")
    say(f"  one call at a time, {fmt_int(cfg['svc_latency_calls'])} calls each, alternating: a toolpool "
        f"run - co-process, then serve over the Unix socket (us):")
    for name, (direct, served, diff) in (("--relaxed", relaxed), ("durable", durable)):
        say(f"    {name:10} co-process p50 {pct(direct, 50):6.0f}, p99 {pct(direct, 99):6.0f}; serve p50 "
            f"{pct(served, 50):6.0f}, p99 {pct(served, 99):6.0f}; added, the median of the pairs' "
            f"differences: {pct(diff, 50):5.0f}")
    added = pct(relaxed[2], 50)

    # Memory and descriptors through many requests.
    n = cfg["svc_memory"]
    port = free_port()
    svc = Service(tp, "serve-memory", f"127.0.0.1:{port}", j).start()
    threads = cfg["svc_wrk_threads"]
    quota = n // threads
    probe = toolpool_client.Client(svc.listen, retries=0, timeout=5)

    def all_done():
        try:
            return all(probe.result(f"mem-{t}-{quota}", wait=False) for t in range(1, threads + 1))
        except toolpool_client.ToolpoolError:
            return False            # 404: not yet posted

    probe.health()                  # its connection is open from the start: not a new fd
    budget = max(60, int(3 * n / max(wrk["calls_per_s"], 1000)))
    t_start = time.monotonic()
    mem = run_wrk(f"http://127.0.0.1:{port}", cfg, "mem", budget, quota, all_done)
    t_end = time.monotonic()
    probe.close()
    mem["checked"] = check_ran(svc.listen, "mem", mem["issued"], 20)
    svc.stop()
    s = [x for x in svc.samples if x[1] and t_start <= x[0] <= t_end]
    t_first = s[0][0] + 0.1 * (s[-1][0] - s[0][0])
    first = [x for x in s if x[0] <= t_first]
    rest = [x for x in s if x[0] > t_first] or first
    peak_first, peak_all = max(x[1] for x in first), max(x[1] for x in s)
    anon_first, anon_all = max(x[2] for x in first), max(x[2] for x in s)
    fd_first, fd_rest, fd_end = max(x[4] for x in first), max(x[4] for x in rest), s[-1][4]
    rss_ratio = peak_all / peak_first
    # Flat as in section 4: 10 %, or 1 MiB, whichever is more. At 5 MiB a
    # tenth is half a MiB, about what the store's mapped pages (RssFile)
    # swing by from one sample to the next.
    flat = peak_all <= max(peak_first * SVC_RSS_FLAT, peak_first + RSS_FLAT_KIB)
    fds_flat = fd_rest <= fd_first
    say(f"  {fmt_int(mem['requests'])} requests (wrk, TCP) in {mem['seconds']:.1f} s, "
        f"{fmt_int(mem['calls_per_s'])} calls/s, {wrk_errors(mem)} errors; serve sampled every 0.1 s:")
    say(f"    RSS peak: {peak_first / 1024:.1f} MiB in the first 10 %, {peak_all / 1024:.1f} MiB overall "
        f"({rss_ratio:.2f}x, {(peak_all - peak_first) / 1024:+.1f} MiB); heap (RssAnon) "
        f"{anon_first / 1024:.1f} -> {anon_all / 1024:.1f} MiB; store map (RssFile) "
        f"{max(x[3] for x in first) / 1024:.1f} -> {max(x[3] for x in s) / 1024:.1f} MiB; "
        f"open fds: at most {fd_first} in the first 10 %, {fd_rest} after, {fd_end} at the end")
    stolen, secs = steal_ms() - stolen, time.monotonic() - t0
    say(f"  load average (1 min) {load0:.2f} at the start of this section, {loadavg():.2f} at its end; "
        f"steal time {stolen:.0f} ms of {secs * os.cpu_count() * 1000:.0f} ms of vCPU time")

    r_wrk = wrk["calls_per_s"] / cel["calls_per_s"]
    r_py = py["calls_per_s"] / cel["calls_per_s"]
    target(f"service calls/s with wrk >= {fmt_int(SVC_WRK_CALLS)}", fmt_int(wrk["calls_per_s"]),
           wrk["calls_per_s"] >= SVC_WRK_CALLS)
    target(f"service >= {SVC_VS_CELERY:.0f}x Celery (wrk; Celery's own client)", f"{r_wrk:.2f}x",
           r_wrk >= SVC_VS_CELERY)
    target(f"  (Python clients on both sides, {py['threads']} threads each)", f"{r_py:.2f}x",
           r_py >= SVC_VS_CELERY)
    target(f"added latency over a run co-process (--relaxed), p50 < {SVC_ADDED_US / 1e3:.1f} ms",
           f"{added / 1e3:.3f} ms", added < SVC_ADDED_US)
    target(f"serve RSS flat (<= {SVC_RSS_FLAT:.2f}x or +1 MiB), fds steady, {fmt_int(mem['requests'])} req.",
           f"{rss_ratio:.2f}x, fds {fd_first}->{fd_rest}", flat and fds_flat)
    out.update({"python": py, "python_rounds": pys, "wrk": wrk, "wrk_rounds": wrks, "celery": cel,
                "sequential_us": {"relaxed": dict(zip(("coprocess", "serve", "pairs"), relaxed)),
                                  "durable": dict(zip(("coprocess", "serve", "pairs"), durable)),
                                  "added_p50": added},
                "memory": {"wrk": mem, "samples": svc.samples, "peak_first_kib": peak_first,
                           "peak_kib": peak_all, "ratio": rss_ratio, "fd_first": fd_first,
                           "fd_rest": fd_rest, "fd_end": fd_end},
                "steal_ms": stolen, "load": [load0, loadavg()]})
    res["service"] = out
    res["targets"]["svc_wrk"] = {"value": wrk["calls_per_s"], "pass": wrk["calls_per_s"] >= SVC_WRK_CALLS}
    res["targets"]["svc_celery"] = {"value": r_wrk, "python": r_py, "pass": r_wrk >= SVC_VS_CELERY}
    res["targets"]["svc_added"] = {"value_us": added, "pass": added < SVC_ADDED_US}
    res["targets"]["svc_rss"] = {"value": rss_ratio, "fd_first": fd_first, "fd_rest": fd_rest,
                                 "pass": flat and fds_flat}
    say()


def bench_payload(tp, cfg, scratch, res):
    say("== 9. payloads of real size: echo of 10 KB, 100 KB and 1 MB args (in, and back out as the "
        "result), -j 2: calls/s, MiB/s of args, supervisor peak RSS")
    say(f"  {'':34} {'10 KB':>26} {'100 KB':>26} {'1 MB':>26}")
    rows = {"toolpool plugin echo (durable)": {}, "toolpool plugin echo (--relaxed)": {},
            "pebble ProcessPool.schedule(echo)": {}, "toolpool exec cat (durable)": {}, "xargs -P2 cat": {}}
    exec_registry = os.path.join(scratch, "cat.json")
    write_registry(exec_registry, [{"name": "cat", "exec": ["cat"]}])
    for size in cfg["payload_sizes"]:
        n, ne = cfg["payload_calls"][size], cfg["payload_exec_calls"][size]
        args = json.dumps({"p": "x" * (size - len('{"p":""}'))}, separators=(",", ":"))
        calls = write_calls(os.path.join(scratch, f"payload{size}.jsonl"), n, "echo", args)
        for key, relaxed in (("toolpool plugin echo (durable)", False), ("toolpool plugin echo (--relaxed)", True)):
            r = tp.run(calls, tp.plugin_registry, 2, tp.fresh(f"payload{size}{'r' if relaxed else ''}"), relaxed)
            os.unlink(r["out"])
            rows[key][size] = r
        os.unlink(calls)
        rows["pebble ProcessPool.schedule(echo)"][size] = pebble("echo", n, 2, size)
        calls = write_calls(os.path.join(scratch, f"payload-cat{size}.jsonl"), ne, "cat", args)
        r = tp.run(calls, exec_registry, 2, tp.fresh(f"payload-cat{size}"))
        os.unlink(r["out"])
        os.unlink(calls)
        rows["toolpool exec cat (durable)"][size] = r
        one = os.path.join(scratch, f"payload{size}.json")
        with open(one, "w") as f:
            f.write(args)
        with open(one + ".list", "w") as f:
            f.write((one + "\n") * ne)
        rows["xargs -P2 cat"][size] = shell_peer(f"xargs -P2 -n1 -a {one}.list cat > /dev/null", ne)
        os.unlink(one)
        os.unlink(one + ".list")
    for name, d in rows.items():
        cells = []
        for size in cfg["payload_sizes"]:
            f = d[size]
            rss = f" {f['rss_kib'] / 1024:4.0f}M" if "rss_kib" in f else "      "
            cells.append(f"{fmt_int(f['calls_per_s']):>6}/s {f['calls_per_s'] * size / 1048576:6.1f} MiB/s{rss}")
        say(f"  {name:34} " + " ".join(f"{c:>26}" for c in cells))
    say("  (each cell: calls/s, MiB/s of args, and for toolpool the supervisor's peak RSS)")
    res["payload"] = {k: {str(s): v for s, v in d.items()} for k, d in rows.items()}
    ratios = {}
    for size in cfg["payload_sizes"]:
        ratios[size] = (rows["toolpool plugin echo (durable)"][size]["calls_per_s"]
                        / rows["pebble ProcessPool.schedule(echo)"][size]["calls_per_s"])
        xr = rows["toolpool exec cat (durable)"][size]["calls_per_s"] / rows["xargs -P2 cat"][size]["calls_per_s"]
        say(f"  {fmt_int(size):>9} bytes: toolpool (durable) / pebble {ratios[size]:.2f}x; "
            f"toolpool exec cat / xargs -P2 cat {xr:.2f}x")
    peak = max(rows[k][s]["rss_kib"] for k in rows if k.startswith("toolpool") for s in cfg["payload_sizes"])
    ok = all(ratios[s] >= PAYLOAD_VS_PEBBLE for s in cfg["payload_sizes"] if s >= 100000)
    worst = min(ratios[s] for s in cfg["payload_sizes"] if s >= 100000)
    target(f"echo at 100 KB and 1 MB (durable) >= {PAYLOAD_VS_PEBBLE:.0f}x pebble", f"{worst:.2f}x (the lower)", ok)
    target("supervisor peak RSS < 64 MiB at every payload size", f"{peak / 1024:.1f} MiB", peak < RSS_LIMIT_KIB)
    res["targets"]["payload_vs_pebble"] = {"value": worst, "pass": ok}
    res["targets"]["payload_rss"] = {"value_kib": peak, "pass": peak < RSS_LIMIT_KIB}
    say()


def mcp_bench(n, lanes, command, tool="echo"):
    return peer(["node", os.path.join(PEERS, "mcp_bench.mjs"), str(n), str(lanes), tool,
                 json.dumps({"message": "hello"}), "--", *command])


def mcp_held_memory(tp, registry, n):
    """n calls at once, each holding its place for 2 s, through `toolpool mcp` to one
    server it imported (mcp_servers): the peak summed RSS and Pss (KiB) of toolpool's
    processes and the server's (everything under the host's child), and how many."""
    settle()
    cmd = ["node", os.path.join(PEERS, "mcp_bench.mjs"), str(n), str(n), "everything.trigger-long-running-operation",
           json.dumps({"duration": 2, "steps": 1}), "--",
           tp.bin, "mcp", "-q", "-j", "2", "-r", registry, "-s", tp.fresh("mcp-held")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(p.pid, tree=True)
    sampler.start()
    out, err = p.communicate()
    sampler.stop.set()
    sampler.join()
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}: {err.strip()[-2000:]}")
    return json.loads(out), sampler.tree_rss, sampler.tree_pss, sampler.tree_procs


def bench_mcp(tp, cfg, scratch, res):
    say("== 10. MCP: server-everything's echo through the SDK's client, directly and through "
        "`toolpool mcp -j 4` (the mcp adapter), one call at a time and with "
        f"{cfg['mcp_lanes']} at once (each its own job); and through one copy of it that `toolpool mcp -j 2` "
        "imported (mcp_servers), its calls sharing one session")
    everything = [shutil.which("node") or "node",
                  os.path.join(ROOT, "bench", "node_modules", "@modelcontextprotocol", "server-everything",
                               "dist", "index.js"), "stdio"]
    registry = os.path.join(scratch, "mcp.json")
    write_registry(registry, [{"name": "echo", "mcp": {"command": everything, "tool": "echo"}}])

    # the same server imported (mcp_servers): one copy, its calls sharing one session
    shared = os.path.join(scratch, "mcp-shared.json")
    with open(shared, "w") as f:
        json.dump({"mcp_servers": {"everything": {"command": everything, "max_in_flight": 256}}}, f)

    def toolpool_cmd(name, relaxed=False):
        return [tp.bin, "mcp", "-q", "-j", "4", "-r", registry, "-s", tp.fresh(name)] + (["--relaxed"] if relaxed else [])

    def shared_cmd(name):
        return [tp.bin, "mcp", "-q", "-j", "2", "-r", shared, "-s", tp.fresh(name)]

    rows = [("direct", "SDK client -> server-everything", lambda i: everything, 1),
            ("toolpool", "SDK client -> toolpool mcp -> it", lambda i: toolpool_cmd(f"mcp-seq{i}"), 1),
            ("toolpool_relaxed", "  the same, --relaxed", lambda i: toolpool_cmd(f"mcp-seqr{i}", True), 1),
            ("direct_conc", "SDK client -> server-everything", lambda i: everything, cfg["mcp_lanes"]),
            ("toolpool_conc", "SDK client -> toolpool mcp -> it", lambda i: toolpool_cmd(f"mcp-conc{i}"),
             cfg["mcp_lanes"]),
            ("toolpool_conc_relaxed", "  the same, --relaxed", lambda i: toolpool_cmd(f"mcp-concr{i}", True),
             cfg["mcp_lanes"]),
            ("shared_conc", "SDK client -> toolpool mcp -> one copy", lambda i: shared_cmd(f"mcp-shared{i}"),
             cfg["mcp_lanes"])]
    rounds = {key: [] for key, *_ in rows}
    for i in range(cfg["mcp_rounds"]):
        for key, _, cmd, lanes in rows:
            tool = "everything.echo" if key.startswith("shared") else "echo"
            rounds[key].append(mcp_bench(cfg["mcp_seq"] if lanes == 1 else cfg["mcp_conc"], lanes, cmd(i), tool))
    med = {k: sorted(v, key=lambda f: f["calls_per_s"])[len(v) // 2] for k, v in rounds.items()}
    res["mcp"] = rounds
    say(f"  {'':36} {'at once':>8} {'calls/s':>9} {'p50':>9} {'p99':>9}")
    for key, name, _, lanes in rows:
        f = med[key]
        say(f"  {name:36} {lanes:>8} {fmt_int(f['calls_per_s']):>9} {f['p50_us'] / 1e3:7.2f}ms "
            f"{f['p99_us'] / 1e3:7.2f}ms")
    over = med["toolpool"]["p50_us"] / med["direct"]["p50_us"]
    conc = med["toolpool_conc"]["calls_per_s"] / med["direct_conc"]["calls_per_s"]
    target(f"one at a time: p50 through toolpool <= {MCP_SEQ_OVERHEAD}x direct", f"{over:.2f}x",
           over <= MCP_SEQ_OVERHEAD)
    target("at once: toolpool mcp -j 4 > direct calls/s", f"{conc:.2f}x", conc > 1)
    shared_conc = med["shared_conc"]["calls_per_s"] / med["direct_conc"]["calls_per_s"]
    target("at once, one shared copy of the server: >= 1.0x direct calls/s", f"{shared_conc:.2f}x", shared_conc >= 1)
    held, rss, pss, procs = mcp_held_memory(tp, shared, cfg["mcp_held"])
    say(f"  {cfg['mcp_held']} calls in flight (2 s each) on one copy: {procs} processes (toolpool's and the "
        f"server's), {rss / 1024:.1f} MiB RSS, {pss / 1024:.1f} MiB Pss at the peak; "
        f"{fmt_int(held['calls_per_s'])} calls/s")
    target(f"{cfg['mcp_held']} in flight to one Node server: RSS < {MCP_HELD_KIB // 1024} MiB", f"{rss / 1024:.1f} MiB",
           rss < MCP_HELD_KIB)
    res["targets"]["mcp_seq"] = {"value": over, "pass": over <= MCP_SEQ_OVERHEAD}
    res["targets"]["mcp_conc"] = {"value": conc, "pass": conc > 1}
    res["targets"]["mcp_shared_conc"] = {"value": shared_conc, "pass": shared_conc >= 1}
    res["targets"]["mcp_held_rss"] = {"value_kib": rss, "pass": rss < MCP_HELD_KIB}
    say()


def mcp_modules(build):
    """Where the MCP SDK and server-everything are: bench/node_modules (bench/run installs
    them), else the build's npm folder (tests/npm_deps.sh installs them there); None without."""
    for d in (os.path.join(HERE, "node_modules"), os.path.join(build, "npm", "node_modules")):
        if all(os.path.isfile(os.path.join(d, "@modelcontextprotocol", p, "package.json"))
               for p in ("sdk", "server-everything")):
            return d
    return None


def bench_mcp_shared(tp, cfg, scratch, res, build):
    say("== 10b. MCP, one shared session: server-everything's echo through the SDK's client, directly, and "
        "through one copy of the server that `toolpool mcp -j 2` imported (mcp_servers), every call on its one "
        f"session; one call at a time and {cfg['mcp_lanes']} at once (each lane its own job), in alternated rounds")
    modules = mcp_modules(build) if shutil.which("node") else None
    if modules is None:
        say("  skipped: no node, or neither bench/node_modules nor the build's npm folder holds the MCP SDK and "
            "server-everything (bench/run or tests/npm_deps.sh installs them)")
        say()
        return
    everything = [shutil.which("node"), os.path.join(modules, "@modelcontextprotocol", "server-everything", "dist",
                                                     "index.js"), "stdio"]
    shared = os.path.join(scratch, "mcp-one-session.json")
    with open(shared, "w") as f:
        json.dump({"mcp_servers": {"everything": {"command": everything, "max_in_flight": 256}}}, f)

    def run(n, lanes, tool, command):
        settle()
        cmd = ["node", os.path.join(PEERS, "mcp_bench.mjs"), str(n), str(lanes), tool,
               json.dumps({"message": "hello"}), "--", *command]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TOOLPOOL_BENCH_MODULES=modules))
        if p.returncode != 0:
            sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
        return json.loads(p.stdout)

    def through(name, relaxed):
        return lambda: [tp.bin, "mcp", "-q", "-j", "2", "-r", shared, "-s", tp.fresh(name)] + \
            (["--relaxed"] if relaxed else [])

    lanes = cfg["mcp_lanes"]
    rows = [("direct_seq", "SDK client -> server-everything", 1, "echo", lambda: everything),
            ("relaxed_seq", "SDK client -> toolpool mcp --relaxed -> it", 1, "everything.echo",
             through("mcps-seqr", True)),
            ("durable_seq", "SDK client -> toolpool mcp -> it", 1, "everything.echo", through("mcps-seq", False)),
            ("direct_conc", "SDK client -> server-everything", lanes, "echo", lambda: everything),
            ("relaxed_conc", "SDK client -> toolpool mcp --relaxed -> it", lanes, "everything.echo",
             through("mcps-concr", True)),
            ("durable_conc", "SDK client -> toolpool mcp -> it", lanes, "everything.echo",
             through("mcps-conc", False))]
    rounds = {key: [] for key, *_ in rows}
    for i in range(cfg["mcp_shared_rounds"]):
        # each round in another order, so that a machine growing busier weighs on every row alike
        for key, _, n_lanes, tool, cmd in (rows if i % 2 == 0 else rows[::-1]):
            n = cfg["mcp_shared_seq"] if n_lanes == 1 else cfg["mcp_shared_conc"]
            rounds[key].append(run(n, n_lanes, tool, cmd()))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("calls_per_s", "p50_us", "p99_us")}
           for k, v in rounds.items()}
    res["mcp_shared"] = rounds
    say(f"  {'':44} {'at once':>8} {'calls/s':>9} {'p50':>9} {'p99':>9}")
    for key, name, n_lanes, *_ in rows:
        f = med[key]
        say(f"  {name:44} {n_lanes:>8} {fmt_int(f['calls_per_s']):>9} {f['p50_us'] / 1e3:7.3f}ms "
            f"{f['p99_us'] / 1e3:7.2f}ms")
    conc = med["relaxed_conc"]["calls_per_s"] / med["direct_conc"]["calls_per_s"]
    conc_durable = med["durable_conc"]["calls_per_s"] / med["direct_conc"]["calls_per_s"]
    added = med["relaxed_seq"]["p50_us"] - med["direct_seq"]["p50_us"]
    added_durable = med["durable_seq"]["p50_us"] - med["direct_seq"]["p50_us"]
    fsync = res.get("machine", {}).get("fsync_us", 0)
    say(f"  (medians of {cfg['mcp_shared_rounds']} rounds; durable at {lanes} at once: {conc_durable:.2f}x direct; "
        f"durable one at a time: p50 {added_durable / 1e3:.3f} ms added, beside {fsync / 1e3:.3f} ms for a 4 KiB "
        "write + fsync here)")
    m = res.get("machine", {})
    if m.get("wake_apart_us"):
        say(f"  (a call through toolpool wakes four processes more than the direct path: the supervisor and the "
            f"worker, each way; two pipe round trips here: {2 * m['wake_same_us'] / 1e3:.3f} ms on one CPU, "
            f"{2 * m['wake_apart_us'] / 1e3:.3f} ms across two)")
    target(f"{lanes} at once, one session, --relaxed: >= {MCP_SHARED_CONC:.1f}x direct calls/s", f"{conc:.2f}x",
           conc >= MCP_SHARED_CONC)
    target(f"one at a time, one session, --relaxed: p50 added < {MCP_SHARED_ADDED_US / 1e3:.2f} ms",
           f"{added / 1e3:.3f} ms", added < MCP_SHARED_ADDED_US)
    res["targets"]["mcp_one_session_conc"] = {"value": conc, "durable": conc_durable, "pass": conc >= MCP_SHARED_CONC}
    res["targets"]["mcp_one_session_added"] = {"value_us": added, "durable_us": added_durable, "fsync_us": fsync,
                                               "pass": added < MCP_SHARED_ADDED_US}
    say()


# ---------------------------------------------------------------------------
# 12. the morning after: toolpool failures


def bench_triage(tp, cfg, scratch, res):
    n = cfg["triage"]
    say(f"== 12. the morning after: `toolpool failures` over a store of {fmt_int(n)} results, half of them "
        "failed (calls of 20 tools the registry does not have, recorded UnknownTool)")
    calls = os.path.join(scratch, "triage.jsonl")
    with open(calls, "w") as f:
        for i in range(n):
            tool = "noop" if i % 2 else f"gone{i % 40}"
            f.write(json.dumps({"id": f"t{i}", "tool": tool, "args": {"i": i}}) + "\n")
    store = tp.fresh("triage")
    p = subprocess.run([tp.bin, "run", "-q", "-j", "2", "--relaxed", "--store", store, "-r", tp.plugin_registry,
                        "-o", os.devnull, calls], capture_output=True, text=True)
    if p.returncode != 1:
        sys.exit(f"bench: toolpool run of the triage store: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    times = {}
    for how, extra in (("text", []), ("--json", ["--json"])):
        best = None
        for _ in range(3):
            t0 = time.monotonic()
            p = subprocess.run([tp.bin, "failures", "--store", store, *extra], capture_output=True, text=True)
            secs = time.monotonic() - t0
            if p.returncode != 0:
                sys.exit(f"bench: toolpool failures: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
            best = secs if best is None else min(best, secs)
        times[how] = best
        say(f"  {how:8} {best:6.3f} s (best of 3): {p.stdout.splitlines()[0] if how == 'text' else ''}")
    worst = max(times.values())
    target(f"failures over {fmt_int(n)} results < {TRIAGE_S:.0f} s", f"{worst:.3f} s", worst < TRIAGE_S)
    res["triage"] = times
    res["targets"]["triage"] = {"value_s": worst, "pass": worst < TRIAGE_S}
    os.unlink(calls)
    say()


def bench_store(tp, cfg, scratch, res):
    n = cfg["store"]
    say(f"== 14. keeping a store: `toolpool store prune` of {fmt_int(n - n // 10)} of {fmt_int(n)} results "
        "(jobs of 10 calls), then `toolpool store compact`")
    calls = os.path.join(scratch, "store.jsonl")
    with open(calls, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"s{i}", "job": f"j{i // 10}", "step": i % 10 + 1,
                                "tool": "echo" if i % 10 == 0 else "noop", "args": {"i": i}}) + "\n")
    store = tp.fresh("store")
    p = subprocess.run([tp.bin, "run", "-q", "-j", "2", "--relaxed", "--store", store, "-r", tp.plugin_registry,
                        "-o", os.devnull, calls], capture_output=True, text=True)
    os.unlink(calls)
    if p.returncode != 0:
        sys.exit(f"bench: toolpool run of the store: exit {p.returncode}: {p.stderr.strip()[-2000:]}")

    def info():
        q = subprocess.run([tp.bin, "store", "info", "--json", "--store", store], capture_output=True, text=True)
        if q.returncode != 0:
            sys.exit(f"bench: toolpool store info: exit {q.returncode}: {q.stderr.strip()[-2000:]}")
        return json.loads(q.stdout)

    def timed(*args):
        t0 = time.monotonic()
        q = subprocess.run([tp.bin, "store", *args, "--store", store], capture_output=True, text=True)
        secs = time.monotonic() - t0
        if q.returncode != 0:
            sys.exit(f"bench: toolpool store {args[0]}: exit {q.returncode}: {q.stderr.strip()[-2000:]}")
        return secs

    first = info()
    prune_s = timed("prune", "--tool", "noop")
    pruned = info()
    compact_s = timed("compact")
    compacted = info()
    mb = lambda i: i["file_bytes"] / 1e6  # noqa: E731
    say(f"  store of {fmt_int(n)} results: {mb(first):8.1f} MB ({first['file_bytes'] / n:.0f} bytes a call)")
    say(f"  prune {fmt_int(first['results']['count'] - pruned['results']['count'])} results: {prune_s:7.2f} s "
        f"({(first['results']['count'] - pruned['results']['count']) / prune_s:,.0f} results/s); "
        f"the file {mb(pruned):.1f} MB, {pruned['free_bytes'] / 1e6:.1f} MB of it free")
    say(f"  compact: {compact_s:7.2f} s; the file {mb(pruned):.1f} MB -> {mb(compacted):.1f} MB "
        f"({fmt_int(compacted['results']['count'])} results)")
    res["store"] = {"results": n, "mb_before": mb(first), "prune_s": prune_s, "mb_pruned": mb(pruned),
                    "compact_s": compact_s, "mb_compacted": mb(compacted),
                    "kept": compacted["results"]["count"]}
def bench_shard(tp, cfg, scratch, res):
    n, shards = cfg["shard_calls"], cfg["shards"]
    cores = os.cpu_count() or 1
    say(f"== 13. more than one machine, on one: a {fmt_int(n)}-call no-op batch as {shards} shards "
        f"(`run --shard K/{shards}`, {shards} processes at once, -j {max(1, cores // shards)} each), against one run "
        f"(-j {cores}); then `merge` of {cfg['merge_shards']} stores of {fmt_int(cfg['merge_each'])} results")
    calls = os.path.join(scratch, "shard.jsonl")
    with open(calls, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"s{i}", "job": f"j{i // 4}", "step": i % 4 + 1, "tool": "noop",
                                "args": {"i": i}}) + "\n")

    def run(store, *extra, j):
        return subprocess.Popen([tp.bin, "run", "-q", "-j", str(j), "--store", store, "-r", tp.plugin_registry,
                                 "-o", os.devnull, *extra, calls], stderr=subprocess.PIPE, text=True)

    def wait_all(procs):
        for p in procs:
            err = p.communicate()[1]
            if p.returncode != 0:
                sys.exit(f"bench: toolpool run --shard: exit {p.returncode}: {err.strip()[-2000:]}")
    t0 = time.monotonic()
    wait_all([run(tp.fresh("shard-one"), j=cores)])
    one = n / (time.monotonic() - t0)
    t0 = time.monotonic()
    wait_all([run(tp.fresh(f"shard-{k}"), "--shard", f"{k}/{shards}", j=max(1, cores // shards))
              for k in range(shards)])
    split = n / (time.monotonic() - t0)
    say(f"  one run      {fmt_int(one):>10} calls/s")
    say(f"  {shards} shards     {fmt_int(split):>10} calls/s, all of them together ({split / one:.2f}x): each reads "
        "the whole file and skips the other shards' lines")
    target(f"{shards} shards >= {SHARD_VS_ONE:.0%} of one run's calls/s", f"{split / one:.2f}x",
           split / one >= SHARD_VS_ONE)

    m, each = cfg["merge_shards"], cfg["merge_each"]
    with open(calls, "w") as f:
        for i in range(m * each):
            f.write(json.dumps({"id": f"m{i}", "tool": "noop", "args": {"i": i}}) + "\n")
    stores = [tp.fresh(f"merge-{k}") for k in range(m)]
    for k, store in enumerate(stores):
        wait_all([run(store, "--relaxed", "--shard", f"{k}/{m}", j=cores)])
    merged, out = tp.fresh("merged"), os.path.join(scratch, "merged.jsonl")
    t0 = time.monotonic()
    p = subprocess.run([tp.bin, "merge", "-q", "--store", merged, *stores], capture_output=True, text=True)
    t_store = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: toolpool merge: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    t0 = time.monotonic()
    p = subprocess.run([tp.bin, "merge", "-q", "--results", out, "--input", calls, merged], capture_output=True,
                       text=True)
    t_results = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: toolpool merge --results: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    say(f"  merge --store    {t_store:6.2f} s: {m} stores, {fmt_int(m * each)} results")
    say(f"  merge --results  {t_results:6.2f} s: {fmt_int(m * each)} lines in the file's order")
    total = t_store + t_results
    target(f"merge of {m} x {fmt_int(each)} results < {MERGE_S:.0f} s", f"{total:.2f} s", total < MERGE_S)
    res["shard"] = {"calls": n, "shards": shards, "one_calls_per_s": one, "shards_calls_per_s": split,
                    "merge_store_s": t_store, "merge_results_s": t_results}
    res["targets"]["shard"] = {"value": split / one, "pass": split / one >= SHARD_VS_ONE}
    res["targets"]["merge"] = {"value_s": total, "pass": total < MERGE_S}
    os.unlink(calls)
    say()


# ---------------------------------------------------------------------------
# 11. http tools


class SlowServer:
    """bench/slow_server, built with toolpool: GET /slow?ms=N answers after N ms. It reads
    its stdin until it closes: the pipe is ours, and stop() (or this process's end) closes it."""

    def __init__(self, build):
        path = os.path.join(build, "slow_server")
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: no {path}: cmake --build {build} builds it")
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        SERVICES.append(self)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            sys.exit(f"bench: {path}: no port on its first line (exit {self.proc.poll()})")
        self.port = int(line)

    def url(self, ms):
        return f"http://127.0.0.1:{self.port}/slow?ms={ms}"

    def stats(self, who, calls=None):
        """The server's counts since the last call (which it then starts again): the /slow
        requests answered, and the most in flight at once. calls: how many who made, each
        of which must have been answered once."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as r:
            st = json.loads(r.read())
        if calls is not None and st["answered"] != calls:
            sys.exit(f"bench: {who}: {calls} calls, and the server answered {st['answered']} requests")
        return st

    def drain(self, who):
        """Waits for the requests a client left in flight (wrk stops with its connections'
        requests unanswered) to be answered, and returns the counts of who's run."""
        st = self.stats(who)
        end = time.monotonic() + 10
        while self.stats(who)["in_flight"] and time.monotonic() < end:
            time.sleep(0.05)
        return st

    def stop(self):
        if self.proc.poll() is not None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def http_registry(tp, path, tools, in_flight):
    """Writes a registry of http tools ((name, url) pairs), each with "max_in_flight":
    in_flight when this build knows the key, and returns the value written (None: the
    build has no such key, and each worker holds one http call at a time)."""
    def write(mif):
        write_registry(path, [{"name": name, "http": {"url": url, "method": "GET"},
                               **({"max_in_flight": mif} if mif else {}), "timeout": "10s",
                               "parameters": {"type": "object"}} for name, url in tools])
    write(in_flight)
    p = subprocess.run([tp.bin, "tools", "list", "--registry", path], capture_output=True, text=True)
    if p.returncode == 0:
        return in_flight
    if "max_in_flight: unknown key" not in p.stderr:
        sys.exit(f"bench: {path}: {p.stderr.strip()}")
    write(None)
    return None


def wrk_ceiling(url, conns, seconds):
    """The server alone under wrk -t2 with conns connections: answers/s and wrk's p50 (us)."""
    cmd = ["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", url]
    p = subprocess.run(cmd, capture_output=True, text=True)
    rate = p50 = None
    for line in p.stdout.splitlines():
        f = line.split()
        if f[:1] == ["Requests/sec:"]:
            rate = float(f[1])
        elif f[:1] == ["50%"]:
            unit = {"us": 1, "ms": 1e3, "s": 1e6}
            num = f[1].rstrip("mus")
            p50 = float(num) * unit[f[1][len(num):]]
    if p.returncode != 0 or rate is None or "Non-2xx" in p.stdout or "Socket errors" in p.stdout:
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}: {p.stdout[-1000:]} {p.stderr[-1000:]}")
    return {"calls_per_s": rate, "p50_us": p50, "conns": conns, "seconds": seconds}


def http_sequential(tp, registry, n, warm=50):
    """n calls one at a time (after warm more) through a `toolpool run -j 1 --relaxed -`
    co-process: each a line written to its stdin, the clock stopped when its result line
    has been read back, in this one thread. Returns the round trips and the attempts'
    durations (trace[0].duration_ms), in us, each sorted."""
    cmd = [tp.bin, "run", "-q", "--no-progress", "-j", "1", "--relaxed", "--store", tp.fresh("http-seq"),
           "-r", registry, "-"]
    settle()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    trips, attempts = [], []
    for i in range(warm + n):
        line = b'{"id":"s%d","tool":"fast","args":{}}\n' % i
        t = time.perf_counter()
        p.stdin.write(line)
        p.stdin.flush()
        out = p.stdout.readline()
        el = time.perf_counter() - t
        rec = json.loads(out) if out else {}
        if not rec.get("ok"):
            p.kill()
            sys.exit(f"bench: {' '.join(cmd)}: call s{i}: {out[:1000]!r}")
        if i >= warm:
            trips.append(el * 1e6)
            attempts.append(rec["trace"][0]["duration_ms"] * 1e3)
    p.stdin.close()
    if p.wait() != 0:
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}")
    return sorted(trips), sorted(attempts)


def curl_sequential(url, n, scratch, warm=50):
    """warm + n GETs of url, one after the other, by one curl process (its config file lists
    them): one connection, kept alive and reused. Returns each transfer's time_total (us,
    sorted, the last n) and the process's wall time a transfer."""
    conf = os.path.join(scratch, "curl-seq.conf")
    with open(conf, "w") as f:
        f.write(f'url = "{url}"\noutput = "/dev/null"\n' * (warm + n))
    cmd = ["curl", "-sS", "-K", conf, "-w", "%{http_code} %{time_total} %{num_connects}\\n"]
    settle()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    rows = [line.split() for line in p.stdout.splitlines()]
    if (p.returncode != 0 or len(rows) != warm + n or any(r[0] != "200" for r in rows)
            or sum(int(r[2]) for r in rows) != 1):
        sys.exit(f"bench: {' '.join(cmd)}: exit {p.returncode}, {len(rows)} transfers of {warm + n}, "
                 f"{sum(int(r[2]) for r in rows if len(r) == 3)} connections: {p.stderr.strip()[-1000:]}")
    return sorted(float(r[1]) * 1e6 for r in rows[warm:]), secs / (warm + n) * 1e6


def bench_http(tp, cfg, scratch, res):
    n, k, ms = cfg["http_calls"], cfg["http_in_flight"], cfg["http_ms"]
    j = 2
    say(f"== 11. http tools, -j {j}: GETs of a local server that answers each after {ms} ms, {k} in flight; "
        f"then one at a time (-j 1) to one that answers at once")
    stolen, t0, load0 = steal_ms(), time.monotonic(), loadavg()
    server = SlowServer(os.path.dirname(tp.bin))
    slow, fast = server.url(ms), server.url(0)
    mif = http_registry(tp, os.path.join(scratch, "http.json"), [("slow", slow)], k // j)
    reg = os.path.join(scratch, "http.json")
    # A build without the key holds one http call a worker: ten thousand calls take 100 s
    # there, so it gets one round.
    nr = cfg["http_rounds"] if mif else 1
    ceiling = wrk_ceiling(slow, k, cfg["http_wrk_seconds"])
    ceiling["in_flight_peak"] = server.drain("wrk")["in_flight_peak"]
    say(f"  the server alone, wrk -t2 -c{k}: {fmt_int(ceiling['calls_per_s'])} answers/s, p50 "
        f"{ceiling['p50_us'] / 1e3:.2f} ms (at most {fmt_int(k * 1000 / ms)}/s: {k} x 1 s / {ms} ms)")

    calls = write_calls(os.path.join(scratch, "http.jsonl"), n, "slow")
    rounds = {"toolpool": [], "aiohttp": []}
    for i in range(nr):
        r = tp.run(calls, reg, j, tp.fresh(f"http-round{i}"), tree=True)
        os.unlink(r["out"])
        r["in_flight_peak"] = server.stats("toolpool", n)["in_flight_peak"]
        rounds["toolpool"].append(r)
        a = peer([PYTHON, os.path.join(PEERS, "aiohttp_bench.py"), slow, str(n), str(k)])
        a["in_flight_peak"] = server.stats("aiohttp", n)["in_flight_peak"]
        rounds["aiohttp"].append(a)
    os.unlink(calls)
    xargs = shell_peer(f"xargs -P{k} -I{{}} curl -sSf -o /dev/null '{slow}&n={{}}'", cfg["http_xargs"])
    xargs["in_flight_peak"] = server.stats("xargs curl", cfg["http_xargs"])["in_flight_peak"]
    med = {key: median_round(v) for key, v in rounds.items()}
    tpr, aio = med["toolpool"], med["aiohttp"]
    names = (f"toolpool http -j {j} x {mif or 1} (durable)", f"aiohttp {aio['aiohttp']}, Semaphore({k})",
             f"xargs -P{k} curl (a curl a call)")
    if not mif:
        say("  (this build has no max_in_flight: each worker holds one http call at a time)")
    if nr > 1:
        say(f"  the median of {nr} alternating rounds (calls/s of each round: "
            + "; ".join(f"{key} " + " ".join(fmt_int(f["calls_per_s"]) for f in v) for key, v in rounds.items())
            + ")")
    table(list(zip(names, (tpr, aio, xargs))), names[1:])
    say(f"  in flight at once, the most the server counted: wrk {ceiling['in_flight_peak']}, toolpool "
        f"{' '.join(str(f['in_flight_peak']) for f in rounds['toolpool'])}, aiohttp "
        f"{' '.join(str(f['in_flight_peak']) for f in rounds['aiohttp'])}, xargs curl {xargs['in_flight_peak']}")
    peak = max(f["tree_rss_kib"] for f in rounds["toolpool"])
    say(f"  toolpool's memory, the highest of its rounds: supervisor and {tpr['tree_procs'] - 1} workers "
        f"{peak / 1024:.1f} MiB RSS summed (the same shared pages counted in each; Pss summed "
        f"{max(f['tree_pss_kib'] for f in rounds['toolpool']) / 1024:.1f} MiB), the supervisor alone "
        f"{max(f['rss_kib'] for f in rounds['toolpool']) / 1024:.1f} MiB")

    # One call at a time: rounds of toolpool and curl alternating.
    http_registry(tp, os.path.join(scratch, "http-fast.json"), [("fast", fast)], k // j)
    seq = []
    for i in range(cfg["http_seq_rounds"]):
        trips, attempts = http_sequential(tp, os.path.join(scratch, "http-fast.json"), cfg["http_seq"])
        server.stats("toolpool, one at a time", cfg["http_seq"] + 50)
        curl, curl_wall = curl_sequential(fast, cfg["http_seq"], scratch)
        server.stats("curl, one at a time", cfg["http_seq"] + 50)
        seq.append({"toolpool_us": trips, "attempt_us": attempts, "curl_us": curl, "curl_wall_us": curl_wall,
                    "added_us": pct(trips, 50) - pct(curl, 50)})
    each = shell_peer(f"xargs -I{{}} curl -sSf -o /dev/null '{fast}'", cfg["http_curl_each"])
    server.stats("a curl a call", cfg["http_curl_each"])
    s = sorted(seq, key=lambda f: f["added_us"])[len(seq) // 2]
    added = s["added_us"]
    rounds_added = " ".join(f"{f['added_us']:.0f}" for f in seq)
    say(f"  one call at a time, {fmt_int(cfg['http_seq'])} calls each after 50 to warm up"
        + (f", the median of {len(seq)} alternating rounds (added, us: {rounds_added})" if len(seq) > 1 else "")
        + ":")
    say(f"    {'':52} {'p50 us':>8} {'p99 us':>8}")
    for name, v in (("toolpool run -j 1 --relaxed - (line in, result out)", s["toolpool_us"]),
                    ("  of it, the attempt (trace duration_ms)", s["attempt_us"]),
                    ("curl, one process, one connection (time_total)", s["curl_us"])):
        say(f"    {name:52} {pct(v, 50):8.0f} {pct(v, 99):8.0f}")
    say(f"    (curl's wall time a transfer, the process's start and exit shared out: {s['curl_wall_us']:.0f} us; "
        f"a curl process a call, one at a time: {1e6 / each['calls_per_s']:.0f} us)")

    stolen, secs = steal_ms() - stolen, time.monotonic() - t0
    say(f"  load average (1 min) {load0:.2f} at the start of this section, {loadavg():.2f} at its end; "
        f"steal time {stolen:.0f} ms of {secs * os.cpu_count() * 1000:.0f} ms of vCPU time")
    r_aio = tpr["calls_per_s"] / aio["calls_per_s"]
    r_xargs = tpr["calls_per_s"] / xargs["calls_per_s"]
    target(f"http, {k} in flight: toolpool >= aiohttp's calls/s", f"{r_aio:.2f}x", r_aio >= HTTP_VS_AIOHTTP)
    target(f"http, {k} in flight: toolpool >= {HTTP_VS_XARGS:.0f}x xargs -P{k} curl", f"{r_xargs:.2f}x",
           r_xargs >= HTTP_VS_XARGS)
    target("http: supervisor + workers peak RSS < 64 MiB", f"{peak / 1024:.1f} MiB", peak < RSS_LIMIT_KIB)
    target(f"http, one at a time: added p50 over curl < {HTTP_ADDED_US / 1e3:.1f} ms", f"{added / 1e3:.3f} ms",
           added < HTTP_ADDED_US)
    server.stop()
    res["http"] = {"max_in_flight": mif, "server_wrk": ceiling, "rounds": rounds, "xargs_curl": xargs,
                   "sequential": seq, "curl_each": each, "steal_ms": stolen, "load": [load0, loadavg()]}
    res["targets"]["http_vs_aiohttp"] = {"value": r_aio, "max_in_flight": mif, "pass": r_aio >= HTTP_VS_AIOHTTP}
    res["targets"]["http_vs_xargs"] = {"value": r_xargs, "pass": r_xargs >= HTTP_VS_XARGS}
    res["targets"]["http_rss"] = {"value_kib": peak, "pass": peak < RSS_LIMIT_KIB}
    res["targets"]["http_added"] = {"value_us": added, "pass": added < HTTP_ADDED_US}
    say()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------------------
# The plot


def plot(sweep, workers, out_dir):
    tsv = os.path.join(out_dir, "workers.tsv")
    names = list(sweep)
    with open(tsv, "w") as f:
        f.write("workers\t" + "\t".join(names) + "\n")
        for j in workers:
            f.write(f"{j}\t" + "\t".join(f"{sweep[n][j]['calls_per_s']:.0f}" for n in names) + "\n")
    png = os.path.join(out_dir, "bench-workers.png")
    titles = {"toolpool": "toolpool, plugin noop (durable, the default)",
              "toolpool --relaxed": "toolpool, plugin noop, --relaxed (no fsync)",
              "pebble": "Python pebble ProcessPool.schedule(timeout=5)",
              "workerpool": "Node workerpool, process workers, .timeout(5000)"}
    styles = {"toolpool": "lw 3 pt 7 lc rgb '#1f5fbf'",
              "toolpool --relaxed": "lw 3 pt 5 dt 2 lc rgb '#1f5fbf'",
              "pebble": "lw 2 pt 9 lc rgb '#d95f02'",
              "workerpool": "lw 2 pt 11 lc rgb '#1b9e77'"}
    plots = ", ".join(f"'{tsv}' using 1:{i + 2} with linespoints {styles[n]} title '{titles[n]}'"
                      for i, n in enumerate(names))
    script = f"""
set terminal pngcairo size 960,600 font 'DejaVu Sans,11'
set output '{png}'
set title 'No-op calls with a per-call timeout: calls/s against workers ({os.cpu_count()} cores)'
set xlabel 'workers (-j)'
set ylabel 'calls per second'
set logscale x 2
set xtics ({", ".join(f"'{j}' {j}" for j in workers)})
set xrange [{workers[0] / 1.3}:{workers[-1] * 1.3}]
set yrange [0:*]
set format y '%.0f'
set grid
set key top left box opaque
set offsets 0, 0, graph 0.35, 0
plot {plots}
"""
    p = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: gnuplot: {p.stderr.strip()}")
    return png


def plot_http(h, out_dir):
    """Section 11's calls/s as bars: the server's own ceiling (wrk), toolpool, aiohttp, xargs + curl."""
    med = {k: sorted(f["calls_per_s"] for f in v)[len(v) // 2] for k, v in h["rounds"].items()}
    bars = [("the server alone (wrk)", h["server_wrk"]["calls_per_s"], "#999999"),
            ("toolpool http, -j 2", med["toolpool"], "#1f5fbf")]
    bars += [(name, med[key], color) for key, name, color in
             (("aiohttp", "Python asyncio + aiohttp", "#d95f02"),) if key in med]
    bars.append(("xargs -P256 curl", h["xargs_curl"]["calls_per_s"], "#1b9e77"))
    tsv = os.path.join(out_dir, "http.tsv")
    with open(tsv, "w") as f:
        for i, (name, v, color) in enumerate(bars):
            f.write(f"{i}\t\"{name}\"\t{v:.0f}\t0x{color[1:]}\n")
    png = os.path.join(out_dir, "bench-http.png")
    script = f"""
set terminal pngcairo size 960,520 font 'DejaVu Sans,11'
set output '{png}'
set title 'GETs of a server answering after 20 ms, 256 in flight: calls/s ({os.cpu_count()} cores)'
set ylabel 'calls per second'
set style fill solid 0.85 noborder
set boxwidth 0.6
set yrange [0:*]
set format y '%.0f'
set grid ytics
unset key
set xtics scale 0
plot '{tsv}' using 1:3:4:xtic(2) with boxes lc rgb variable, '' using 1:3:(sprintf('%.0f', $3)) with labels offset 0,0.8
"""
    p = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: gnuplot: {p.stderr.strip()}")
    return png


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default="build", help="the build folder (default: build)")
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run of under a minute")
    ap.add_argument("--out", default=os.path.join(HERE, "results"),
                    help="where the report, figures and plot go (default: bench/results)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (stores, outputs)")
    ap.add_argument("--only", metavar="SECTIONS",
                    help="run only these sections, comma-separated, of: " + ", ".join(SECTIONS)
                    + " (memory and resume run noop too)")
    a = ap.parse_args()
    only = set(SECTIONS)
    if a.only:
        only = set(a.only.split(","))
        if only - set(SECTIONS):
            ap.error(f"--only: unknown sections {', '.join(sorted(only - set(SECTIONS)))}")
        if only & {"memory", "resume"}:
            only.add("noop")

    build = os.path.abspath(a.build if os.path.isabs(a.build) or os.path.isdir(a.build)
                            else os.path.join(ROOT, a.build))
    if not os.access(os.path.join(build, "toolpool"), os.X_OK):
        sys.exit(f"bench: no {build}/toolpool: build first:\n"
                 f"  cmake -B {a.build} -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build {a.build} -j2")
    cfg = QUICK if a.quick else FULL
    os.makedirs(a.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="toolpool-bench-")
    tp = Toolpool(build, scratch)
    t0 = time.monotonic()
    res = {"quick": a.quick, "targets": {}}
    try:
        m = machine(scratch, build)
        res["machine"] = m
        say(f"toolpool benchmarks{' (--quick: small counts, figures are rough)' if a.quick else ''}")
        say(f"  machine: {m['nproc']} cores, {m['cpu']}, {m['memory']} memory, {m['os']}, "
            f"Linux {m['kernel']}")
        say(f"  disk:    {m['disk']}; 4 KiB write + fsync: {m['fsync_us']:.0f} us (median)")
        apart = m["wake_apart_us"]
        say(f"  wake-up: a pipe round trip between two processes (two wake-ups), median: "
            f"{m['wake_same_us']:.0f} us on one CPU, " + (f"{apart:.0f} us across two" if apart else "one CPU only"))
        say(f"  toolpool {m['toolpool']}")
        say(f"  peers:   {m['python']}, pebble {m['pebble']}; Node {m['node']}, workerpool "
            f"{m['workerpool']}; {m['xargs']}; {m['parallel']}")
        say(f"           {m['wrk']}; Celery {m['celery']} with Redis {m['redis'].removeprefix('v=')}; "
            f"aiohttp {m['aiohttp']}; {m['curl']}")
        say()
        png = None
        if "noop" in only:
            sweep = bench_noop(tp, cfg, scratch, res)
        if "exec" in only:
            bench_exec(tp, cfg, scratch, res)
        if "hang" in only:
            bench_hang(tp, cfg, scratch, res)
        if "memory" in only:
            bench_memory(tp, cfg, scratch, res, sweep["toolpool"][2])
        if "resume" in only:
            bench_resume(tp, cfg, scratch, res, {
                "toolpool noop (durable)": (os.path.join(scratch, "noop_durable.jsonl"), sweep["toolpool"][2]),
                "toolpool noop (--relaxed)": (os.path.join(scratch, "noop_relaxed.jsonl"),
                                              sweep["toolpool --relaxed"][2])})
        if "args" in only:
            bench_args(tp, cfg, scratch, res)
        if "growth" in only:
            bench_growth(tp, cfg, scratch, res)
        if "service" in only:
            bench_service(tp, cfg, scratch, res)
        if "payload" in only:
            bench_payload(tp, cfg, scratch, res)
        if "mcp" in only:
            bench_mcp(tp, cfg, scratch, res)
        if "mcp_shared" in only:
            bench_mcp_shared(tp, cfg, scratch, res, build)
        if "http" in only:
            bench_http(tp, cfg, scratch, res)
            plot_http(res["http"], a.out)
        if "triage" in only:
            bench_triage(tp, cfg, scratch, res)
        if "shard" in only:
            bench_shard(tp, cfg, scratch, res)
        if "store" in only:
            bench_store(tp, cfg, scratch, res)
        if "otlp" in only:
            bench_otlp(tp, cfg, scratch, res)
        if "scoreboard" in only:
            bench_scoreboard(tp, cfg, scratch, res)
        if "noop" in only:
            png = plot(sweep, cfg["workers"], a.out)

        t = res["targets"]
        say("== targets")
        for name, key, val in [
                (f"no-op calls >= {NOOP_VS_PEBBLE:.0f}x pebble (durable), "
                 f">= {NOOP_RELAXED_VS_PEBBLE:.0f}x (--relaxed)", "noop_vs_pebble",
                 lambda v: f"{v['value']:.2f}x, {v['relaxed']:.2f}x"),
                ("exec >= 2x xargs -P2 timeout (durable)", "exec_vs_xargs", lambda v: f"{v['value']:.2f}x"),
                ("exec >= 5x GNU parallel (durable)", "exec_vs_parallel", lambda v: f"{v['value']:.2f}x"),
                ("hung call: deadline to result p99 <= 2 ms", "hang_p99",
                 lambda v: f"{v['value_us'] / 1e3:.2f} ms"),
                ("supervisor peak RSS < 64 MiB and flat", "rss",
                 lambda v: f"{v['value_kib'] / 1024:.1f} MiB, {v['ratio']:.2f}x"),
                (f"resume < {RESUME_US:.1f} us per recorded call", "resume", lambda v: f"{v['value_us']:.2f} us"),
                (f"serve: >= {fmt_int(SVC_WRK_CALLS)} calls/s with wrk", "svc_wrk",
                 lambda v: fmt_int(v["value"])),
                (f"serve: >= {SVC_VS_CELERY:.0f}x Celery (wrk; Celery's own client)", "svc_celery",
                 lambda v: f"{v['value']:.2f}x"),
                (f"serve: added latency p50 < {SVC_ADDED_US / 1e3:.1f} ms", "svc_added",
                 lambda v: f"{v['value_us'] / 1e3:.3f} ms"),
                ("serve: RSS flat and fds steady", "svc_rss",
                 lambda v: f"{v['value']:.2f}x, fds {v['fd_first']}->{v['fd_rest']}"),
                (f"echo at 100 KB and 1 MB (durable) >= {PAYLOAD_VS_PEBBLE:.0f}x pebble", "payload_vs_pebble",
                 lambda v: f"{v['value']:.2f}x"),
                ("supervisor peak RSS < 64 MiB at every payload size", "payload_rss",
                 lambda v: f"{v['value_kib'] / 1024:.1f} MiB"),
                (f"mcp: p50 through toolpool <= {MCP_SEQ_OVERHEAD}x direct, 1 at a time", "mcp_seq",
                 lambda v: f"{v['value']:.2f}x"),
                ("mcp: toolpool mcp -j 4 > direct calls/s, at once", "mcp_conc", lambda v: f"{v['value']:.2f}x"),
                ("mcp: one shared copy >= 1.0x direct calls/s, at once", "mcp_shared_conc",
                 lambda v: f"{v['value']:.2f}x"),
                (f"mcp: 256 in flight to one Node server, RSS < {MCP_HELD_KIB // 1024} MiB", "mcp_held_rss",
                 lambda v: f"{v['value_kib'] / 1024:.1f} MiB"),
                (f"mcp, one session, --relaxed: >= {MCP_SHARED_CONC:.1f}x direct calls/s, 32 at once",
                 "mcp_one_session_conc", lambda v: f"{v['value']:.2f}x"),
                (f"mcp, one session, --relaxed: p50 added < {MCP_SHARED_ADDED_US / 1e3:.2f} ms, 1 at a time",
                 "mcp_one_session_added", lambda v: f"{v['value_us'] / 1e3:.3f} ms"),
                (f"failures over 100,000 results < {TRIAGE_S:.0f} s", "triage", lambda v: f"{v['value_s']:.3f} s"),
                (f"N shards >= {SHARD_VS_ONE:.0%} of one run's calls/s", "shard", lambda v: f"{v['value']:.2f}x"),
                (f"merge of 16 x 62,500 results < {MERGE_S:.0f} s", "merge", lambda v: f"{v['value_s']:.2f} s"),
                ("http: toolpool -j 2 >= aiohttp's calls/s, 256 in flight", "http_vs_aiohttp",
                 lambda v: f"{v['value']:.2f}x"),
                (f"http: toolpool -j 2 >= {HTTP_VS_XARGS:.0f}x xargs -P256 curl", "http_vs_xargs",
                 lambda v: f"{v['value']:.2f}x"),
                ("http: supervisor + workers peak RSS < 64 MiB", "http_rss",
                 lambda v: f"{v['value_kib'] / 1024:.1f} MiB"),
                (f"http: added p50 over curl, 1 at a time < {HTTP_ADDED_US / 1e3:.1f} ms", "http_added",
                 lambda v: f"{v['value_us'] / 1e3:.3f} ms"),
                (f"otlp: no-op calls/s with export on at most {OTLP_SLOWDOWN:.0%} below off", "otlp",
                 lambda v: f"{v['value'] * 100:.1f} % slower"),
                (f"scoreboard: no-op calls/s at most {SCOREBOARD_SLOWDOWN:.0%} below it private", "scoreboard",
                 lambda v: f"{v['value'] * 100:.1f} % slower")]:
            if key in t:
                say(f"  {name:58} {val(t[key]):>18}  {verdict(t[key]['pass'])}")
        say()
        if png:
            say(f"plot: {png}")
        say(f"figures: {os.path.join(a.out, 'results.json')}; took {time.monotonic() - t0:.0f} s")
        res["seconds"] = time.monotonic() - t0
        for f in res.get("hang", {}).values():
            if isinstance(f, dict):
                f.pop("out", None)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1, default=lambda o: None)
        with open(os.path.join(a.out, "report.txt"), "w") as f:
            f.write("\n".join(REPORT) + "\n")
    finally:
        for svc in SERVICES:
            svc.stop()
        if a.keep:
            print(f"scratch kept: {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
