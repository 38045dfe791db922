"""What the Python tests share: the build folder, the client, and a real
`toolpool serve` process they start, kill and restart.

The build folder comes from the first argument that names one, else
$TOOLPOOL_BUILD, else $TOOLPOOL_BUILD_DIR (ctest sets it for every Python
test), else build/ at the top of the source tree.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOLS = os.path.join(HERE, "tools")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import toolpool_client  # noqa: E402,F401


def build_dir():
    """The build folder, taken out of sys.argv so unittest does not see it."""
    for i, a in enumerate(sys.argv[1:], 1):
        if not a.startswith("-") and os.path.isfile(os.path.join(a, "toolpool")):
            del sys.argv[i]
            return os.path.abspath(a)
    env = os.environ.get("TOOLPOOL_BUILD") or os.environ.get("TOOLPOOL_BUILD_DIR")
    return os.path.abspath(env or os.path.join(ROOT, "build"))


BUILD = build_dir()
TOOLPOOL = os.path.join(BUILD, "toolpool")
PLUGIN = os.path.join(BUILD, "examples", "example.so")


def has_serve():
    """Whether this build has `toolpool serve`."""
    try:
        p = subprocess.run([TOOLPOOL, "serve", "--help"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def write_registry(path, tools, **top):
    """Writes a registry: the example plugin's noop and echo, then tools."""
    plugin = [{"name": "noop", "plugin": {"path": PLUGIN}, "timeout": "5s"},
              {"name": "echo", "plugin": {"path": PLUGIN}, "timeout": "5s"}]
    with open(path, "w") as f:
        json.dump(dict(top, tools=plugin + list(tools)), f, indent=1)
    return path


def workers(pid):
    """The live workers of supervisor pid, from /proc: its children that run
    toolpool-worker (not, say, the tracer a sanitizer's leak check clones at
    the supervisor's exit)."""
    kids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z" and st[st.index("(") + 1:st.rindex(")")] == "toolpool-worker":
            kids.add(int(d))
    return kids


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Serve:
    """One `toolpool serve` on a registry and a store, at listen
    ("unix:PATH" or "127.0.0.1:PORT"); its stdout and stderr go to log."""

    def __init__(self, registry, store, listen, log, workers=2, extra=()):
        self.cmd = [TOOLPOOL, "serve", "--registry", registry, "--store", store, "-j", str(workers),
                    "--listen", listen, *extra]
        self.listen = listen
        self.log = log
        self.proc = None

    def start(self, timeout=20):
        """Starts it and waits until /readyz answers."""
        with open(self.log, "ab") as log:
            log.write(f"--- {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        c = toolpool_client.Client(self.listen, retries=0, timeout=5)
        ready = False
        try:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"toolpool serve exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    ready = c.ready()
                except toolpool_client.ToolpoolError as e:
                    ready = e.status == 401     # up, and asking for its token
                if ready:
                    return self
                time.sleep(0.02)
        finally:
            c.close()
            if not ready:
                self.kill9()
        raise RuntimeError(f"toolpool serve not ready after {timeout} s:\n{self.tail()}")

    def kill9(self):
        """SIGKILL, as a crash would: nothing of serve's own runs after it."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout=30):
        """SIGTERM (a drain), then SIGKILL if it is still there."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode if self.proc else None

    def tail(self, n=4000):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


def wait_for(cond, timeout, what, step=0.01):
    """Polls cond() until it is true; AssertionError naming what (a string,
    or a function giving one) after timeout s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")


def executions(log):
    """The call ids a test tool logged, one a line, in the order they ran."""
    try:
        with open(log) as f:
            return [ln.strip() for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def kill_all(procs):
    """SIGKILL to each process still running, and waits for it."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def read_lines(path):
    try:
        with open(path) as f:
            return [ln.split() for ln in f if ln.strip()]
    except FileNotFoundError:
        return []
