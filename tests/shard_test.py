#!/usr/bin/env python3
"""A batch split over machines, on one: `toolpool run --shard K/N` as real
processes on real stores, `toolpool merge` of their stores, `toolpool
shard-status`.

- N shards and their merge give the records one run of the whole file on
  one machine gives (the eval test's agent-like jobs: retries, timeouts,
  circuits opened and escalated), record by record, in the file's order;
  the merged store's escalations are numbered once across the shards.
- A job's calls stay in one shard, whatever the file's order; every line is
  in exactly one shard; --shard slurm and k8s/N read the schedulers'
  variables, and say what is missing (exit 2).
- A shard killed with SIGKILL and run again runs nothing twice.
- merge refuses stores of another file or registry, a shard twice or
  missing, a store with no record of its input.
- examples/k8s: the manifests hold what an Indexed Job and its merge need,
  and their entry command, run once for each index, merges to the same
  records.

Standard library only (and python3-yaml, for the manifests). The build
directory comes from $TOOLPOOL_BUILD_DIR (ctest sets it), else ../build.
"""
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from eval_test import EVAL_REGISTRY, TOOLPOOL, eval_calls, normalized  # noqa: E402

ROOT = os.path.dirname(HERE)


def bad_lines():
    """Lines that are no call: refused, with an id (recorded) and without (recorded nowhere)."""
    return ['{"id": "b1", "job": "jb", "tool": 7}', 'not json at all', '{"tool": "echo"}', '']


class ShardTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="tp-shard-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def toolpool(self, *args, env=None, timeout=120):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("SLURM_") or k == "JOB_COMPLETION_INDEX":
                del e[k]
        e.update(env or {})
        p = subprocess.run([TOOLPOOL] + list(args), capture_output=True, text=True, timeout=timeout,
                           cwd=self.tmp, env=e)
        for text in (p.stdout, p.stderr):
            self.assertNotIn("Sanitizer", text)
            self.assertNotIn("runtime error:", text)
        return p

    def eval_input(self):
        self.write("tools.json", json.dumps(EVAL_REGISTRY))
        calls = eval_calls(jobs=16, steps=8)
        lines = [json.dumps(c) for c in calls]
        lines[10:10] = bad_lines()
        self.write("calls.jsonl", "\n".join(lines) + "\n")
        return calls

    def run_shard(self, store, spec, out, *extra, calls="calls.jsonl", registry="tools.json", env=None):
        return self.toolpool("run", "-q", "-j", "2", "-r", registry, "-s", self.path(store), "-o", self.path(out),
                             *(["--shard", spec] if spec else []), *extra, calls, env=env)

    # ---- the merge equals one machine ----

    def test_shards_merge_to_one_machines_records(self):
        calls = self.eval_input()
        one = self.run_shard("one", None, "one.jsonl")
        self.assertEqual(one.returncode, 1, one.stderr)
        n = 3
        shard_ids = []
        for k in range(n):
            p = self.run_shard("s%d" % k, "%d/%d" % (k, n), "s%d.jsonl" % k)
            self.assertIn(p.returncode, (0, 1), p.stderr)
            with open(self.path("s%d.jsonl" % k)) as f:
                shard_ids.append([json.loads(l).get("id") for l in f])
        # Every line in exactly one shard; a job's calls all in one.
        flat = [i for ids in shard_ids for i in ids]
        self.assertEqual(len(flat), len(calls) + 3)
        self.assertEqual(sorted(i for i in flat if i), sorted([c["id"] for c in calls] + ["b1"]))
        for k, ids in enumerate(shard_ids):
            jobs = {i.split("-")[0] for i in ids if i and i != "b1"}
            for other in shard_ids[:k] + shard_ids[k + 1:]:
                self.assertFalse(jobs & {i.split("-")[0] for i in other if i and i != "b1"})
        self.assertTrue(all(shard_ids), "some shard got no calls")

        p = self.toolpool("merge", "--store", self.path("merged"), *[self.path("s%d" % k) for k in range(n)])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("merged 3 shards", p.stderr)
        p = self.toolpool("merge", "--results", self.path("merged.jsonl"), "--input", "calls.jsonl",
                          self.path("merged"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("one.jsonl")) as f:
            one_lines = f.read().splitlines()
        with open(self.path("merged.jsonl")) as f:
            merged_lines = f.read().splitlines()
        self.assertEqual(len(merged_lines), len(one_lines))
        # In the file's order, line for line.
        want_order = [c["id"] for c in calls]
        want_order[10:10] = ["b1", None, None]
        self.assertEqual([json.loads(l).get("id") for l in merged_lines], want_order)
        a = normalized(l for l in one_lines if json.loads(l).get("id"))
        b = normalized(l for l in merged_lines if json.loads(l).get("id"))
        self.assertEqual(sorted(a), sorted(b))
        for cid in a:
            self.assertEqual(a[cid], b[cid], cid)
        no_id = lambda lines: sorted(l for l in lines if not json.loads(l).get("id"))  # noqa: E731
        self.assertEqual(no_id(merged_lines), no_id(one_lines))
        self.assertTrue(any(r.get("error") == "CircuitOpen" for r in a.values()))
        # The results straight from the shards' stores are the same file.
        p = self.toolpool("merge", "-o", self.path("direct.jsonl"), "--input", "calls.jsonl",
                          *[self.path("s%d" % k) for k in (2, 0, 1)])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("direct.jsonl")) as f:
            direct = f.read().splitlines()
        self.assertEqual([json.loads(l).get("id") for l in direct], want_order)
        self.assertEqual(normalized(l for l in direct if json.loads(l).get("id")), b)

        # Escalations: as many as one machine made, numbered once, each result naming one that exists.
        def escalations(store):
            p = self.toolpool("escalations", "list", "--json", "--store", self.path(store))
            self.assertEqual(p.returncode, 0, p.stderr)
            return [json.loads(l) for l in p.stdout.splitlines()]
        e1, em = escalations("one"), escalations("merged")
        self.assertTrue(e1)
        self.assertEqual(len(em), len(e1))
        ids = {e["id"] for e in em}
        self.assertEqual(len(ids), len(em))
        named = {json.loads(l)["escalation"] for l in merged_lines if json.loads(l).get("escalation")}
        self.assertTrue(named)
        self.assertLessEqual(named, ids)
        for l in merged_lines:
            r = json.loads(l)
            if r.get("escalation"):
                e = next(e for e in em if e["id"] == r["escalation"])
                self.assertEqual(e["job"], r["job"])  # the call's own, or the one that opened its circuit
        # Checkpoints of every job came along; the merged store resumes the whole file as shard 0/1.
        p = self.toolpool("checkpoints", "list", "--json", "--store", self.path("merged"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 16 + 1)  # the jobs, and b1's
        again = self.run_shard("merged", "0/1", "again.jsonl", "--summary-json", self.path("sum.json"))
        self.assertEqual(again.returncode, 1, again.stderr)
        with open(self.path("sum.json")) as f:
            self.assertEqual(json.load(f)["resumed"], len(calls))  # refusals are checked again, calls are not
        # A second merge into the same store is refused only when it is of another batch.
        p = self.toolpool("merge", "--store", self.path("merged"), *[self.path("s%d" % k) for k in range(n)])
        self.assertEqual(p.returncode, 0, p.stderr)

        st = self.toolpool("shard-status", "--json", *[self.path("s%d" % k) for k in range(n)])
        self.assertEqual(st.returncode, 0, st.stderr)
        rows = [json.loads(l) for l in st.stdout.splitlines()]
        self.assertEqual([r.get("shard") for r in rows[:-1]], [0, 1, 2])
        total = rows[-1]
        self.assertEqual(total["calls"], len(calls) + 1)  # lines without an id are recorded nowhere
        self.assertEqual(total["left"], 0)
        self.assertEqual(total["done"], len(calls) + 1)
        self.assertEqual(total["failed"], sum(1 for r in a.values() if not r["ok"]))

    def test_split_is_by_job_not_order(self):
        self.write("tools.json", json.dumps(EVAL_REGISTRY))
        calls = [{"id": "c%d" % i, "job": "j%d" % (i % 40), "step": i // 40 + 1, "tool": "echo", "args": {"i": i}}
                 for i in range(200)]
        calls += [{"id": "solo%d" % i, "tool": "echo", "args": {}} for i in range(20)]
        self.write("calls.jsonl", "".join(json.dumps(c) + "\n" for c in calls))
        shuffled = calls[:]
        random.Random(3).shuffle(shuffled)
        self.write("shuffled.jsonl", "".join(json.dumps(c) + "\n" for c in shuffled[:150]))

        def shard_of(calls_file, k, n, store):
            p = self.run_shard(store, "%d/%d" % (k, n), store + ".jsonl", calls=calls_file)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(self.path(store + ".jsonl")) as f:
                return {json.loads(l)["id"] for l in f}
        a = [shard_of("calls.jsonl", k, 4, "a%d" % k) for k in range(4)]
        b = [shard_of("shuffled.jsonl", k, 4, "b%d" % k) for k in range(4)]
        for k in range(4):
            self.assertLessEqual(b[k], a[k])  # the same jobs, however the file is ordered or cut
        job = {c["id"]: c.get("job", c["id"]) for c in calls}
        for k in range(4):
            for m in range(4):
                if k != m:
                    self.assertFalse({job[i] for i in a[k]} & {job[i] for i in a[m]})
        self.assertEqual(sum(len(s) for s in a), len(calls))
        # Slurm's and Kubernetes' variables give the same shard.
        p = self.run_shard("sl", "slurm", "sl.jsonl", env={"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"})
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("sl.jsonl")) as f:
            self.assertEqual({json.loads(l)["id"] for l in f}, a[2])
        p = self.run_shard("sm", "slurm", "sm.jsonl", env={"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1",
                                                            "SLURM_ARRAY_TASK_MAX": "4"})
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("sm.jsonl")) as f:
            self.assertEqual({json.loads(l)["id"] for l in f}, a[3])
        p = self.run_shard("k8", "k8s/4", "k8.jsonl", env={"JOB_COMPLETION_INDEX": "1"})
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("k8.jsonl")) as f:
            self.assertEqual({json.loads(l)["id"] for l in f}, a[1])

    def test_shard_errors(self):
        self.write("tools.json", json.dumps(EVAL_REGISTRY))
        self.write("calls.jsonl", '{"id": "a", "tool": "echo"}\n')
        for spec, env, words in (("4/4", {}, "K must be below N"), ("1/0", {}, "between 1 and"),
                                 ("x", {}, "expected K/N"), ("slurm", {}, "SLURM_ARRAY_TASK_ID"),
                                 ("slurm", {"SLURM_ARRAY_TASK_ID": "3"}, "SLURM_ARRAY_TASK_COUNT"),
                                 ("slurm", {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"}, "below N"),
                                 ("k8s/3", {}, "JOB_COMPLETION_INDEX is not set"),
                                 ("k8s/3", {"JOB_COMPLETION_INDEX": "3"}, "below N"), ("k8s", {}, "k8s/N")):
            p = self.run_shard("e", spec, "e.jsonl", env=env)
            self.assertEqual(p.returncode, 2, (spec, env, p.stderr))
            self.assertIn(words, p.stderr, (spec, env))
        self.assertFalse(os.path.exists(self.path("e")))
        # Standard input cannot be checked against the other shards'.
        p = subprocess.run([TOOLPOOL, "run", "-q", "-r", "tools.json", "-s", "e", "--shard", "0/2", "-"],
                           input='{"id": "a", "tool": "echo"}\n', capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("not a file", p.stderr)
        # A store holds one shard.
        self.assertEqual(self.run_shard("one", "0/2", "o.jsonl").returncode, 0)
        p = self.run_shard("one", "1/2", "o.jsonl")
        self.assertEqual(p.returncode, 2)
        self.assertIn("holds shard 0/2", p.stderr)

    # ---- kill -9 and run again ----

    def test_killed_shard_reruns_nothing_twice(self):
        log = self.path("ran.log")
        reg = {"tools": [{"name": "slow", "exec": ["/bin/sh", "-c", "cat >/dev/null; echo \"$TOOLPOOL_CALL_ID\" >> "
                                                   + shlex.quote(log) + "; sleep 0.05; echo '{}'"]}]}
        self.write("tools.json", json.dumps(reg))
        calls = [{"id": "c%d" % i, "job": "j%d" % (i % 30), "step": i // 30 + 1, "tool": "slow", "args": {}}
                 for i in range(240)]
        self.write("calls.jsonl", "".join(json.dumps(c) + "\n" for c in calls))
        store = self.path("k")
        p = subprocess.Popen([TOOLPOOL, "run", "-q", "-j", "2", "-r", "tools.json", "-s", store, "--shard", "1/2",
                              "-o", os.devnull, "calls.jsonl"], cwd=self.tmp, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if os.path.exists(log):
                with open(log) as f:
                    if len(f.readlines()) >= 20:
                        break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait()
        st = self.toolpool("shard-status", "--json", store)
        self.assertEqual(st.returncode, 1, st.stderr)  # calls left
        row = json.loads(st.stdout.splitlines()[0])
        self.assertGreater(row["left"], 0)
        self.assertGreater(row["done"], 0)
        self.assertEqual(row["done"] + row["left"], row["calls"])
        p.stderr.close()
        with open(log) as f:
            ran1 = f.read().split()
        p = self.run_shard("k", "1/2", "k.jsonl", "--summary-json", self.path("k.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(log) as f:
            ran2 = f.read().split()[len(ran1):]
        with open(self.path("k.json")) as f:
            resumed = json.load(f)["resumed"]
        # What was recorded is served, not run: only what had no record yet (running, or ended
        # and not yet committed at the kill) runs again.
        self.assertEqual(resumed, row["done"])
        self.assertEqual(len(ran2), row["calls"] - resumed)
        self.assertEqual(len(ran2), len(set(ran2)))
        with open(self.path("k.jsonl")) as f:
            self.assertEqual(sorted(json.loads(l)["id"] for l in f), sorted(set(ran1) | set(ran2)))
        st = self.toolpool("shard-status", store)
        self.assertEqual(st.returncode, 1, st.stdout)  # shard 0/2 has no store here
        self.assertIn("shard 0/2: no store given", st.stdout)

    # ---- what merge refuses ----

    def test_merge_refuses(self):
        self.write("tools.json", json.dumps(EVAL_REGISTRY))
        self.write("other.json", json.dumps(dict(EVAL_REGISTRY, guards={"max_steps": 99})))
        self.write("calls.jsonl", "".join(json.dumps({"id": "c%d" % i, "tool": "echo"}) + "\n" for i in range(40)))
        self.write("calls2.jsonl", "".join(json.dumps({"id": "c%d" % i, "tool": "echo"}) + "\n" for i in range(41)))
        for store, spec, calls, reg in (("a0", "0/2", "calls.jsonl", "tools.json"),
                                        ("a1", "1/2", "calls.jsonl", "tools.json"),
                                        ("b1", "1/2", "calls2.jsonl", "tools.json"),
                                        ("r1", "1/2", "calls.jsonl", "other.json"),
                                        ("c1", "1/3", "calls.jsonl", "tools.json"),
                                        ("plain", None, "calls.jsonl", "tools.json")):
            p = self.run_shard(store, spec, store + ".jsonl", calls=calls, registry=reg)
            self.assertEqual(p.returncode, 0, p.stderr)
        for stores, words in ((["a0", "b1"], "another calls file"), (["a0", "r1"], "another registry"),
                              (["a0", "c1"], "shards"), (["a0", "a0"], "both shard 0/2"),
                              (["a0"], "no store given is shard 1/2"), (["a0", "plain"], "no record")):
            p = self.toolpool("merge", "--store", self.path("m"), *[self.path(s) for s in stores])
            self.assertEqual(p.returncode, 2, stores)
            self.assertIn(words, p.stderr, stores)
        self.assertEqual(self.toolpool("merge", "--store", self.path("m"), self.path("a0"),
                                       self.path("a1")).returncode, 0)
        p = self.toolpool("merge", "-o", self.path("x.jsonl"), "--input", "calls2.jsonl", self.path("m"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("not the calls file", p.stderr)
        p = self.toolpool("merge", "--store", self.path("a0"), self.path("a0"), self.path("a1"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("both the store to write and a store to merge", p.stderr)
        # A store of another batch is not merged into.
        p = self.toolpool("merge", "--store", self.path("plain"), self.path("a0"), self.path("a1"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("merge into a new store", p.stderr)

    # ---- Kubernetes: the manifests, and their command run once per index ----

    def test_k8s_manifests_and_local_indexes(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("python3-yaml is not installed (scripts/install-deps installs it)")
        with open(os.path.join(ROOT, "examples", "k8s", "shards.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        job = next(d for d in docs if d["kind"] == "Job")
        spec = job["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        self.assertEqual(spec["completions"], spec["parallelism"])
        pod = spec["template"]["spec"]
        self.assertEqual(pod["restartPolicy"], "Never")
        c = pod["containers"][0]
        command = c["command"]
        self.assertIn("JOB_COMPLETION_INDEX", " ".join(command))
        script = command[-1]
        self.assertIn("--shard k8s/%d" % spec["completions"], script)
        vols = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        self.assertIn("emptyDir", vols["store"])  # the store on the pod's own disk
        self.assertIn("persistentVolumeClaim", vols["shared"])
        self.assertIn(mounts["store"], script)
        self.assertIn(mounts["shared"], script)
        with open(os.path.join(ROOT, "examples", "k8s", "merge.yaml")) as f:
            merge = next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "Job")
        mpod = merge["spec"]["template"]["spec"]
        mscript = mpod["containers"][0]["command"][-1]
        mmounts = {m["name"]: m["mountPath"] for m in mpod["containers"][0]["volumeMounts"]}
        self.assertIn("emptyDir", {v["name"]: v for v in mpod["volumes"]}["work"])
        self.assertIn("toolpool merge", mscript)
        self.assertIn("--results", mscript)

        # The same command, run here once for each index, with the paths put on this machine.
        self.eval_input()
        shared, local, work = self.path("shared"), self.path("local"), self.path("work")
        os.makedirs(shared)
        os.makedirs(work)
        for name in ("calls.jsonl", "tools.json"):
            os.link(self.path(name), os.path.join(shared, name))
        n = spec["completions"]
        env_paths = {mounts["shared"]: shared, mounts["store"]: local, mmounts["work"]: work}
        self.assertEqual(mmounts["shared"], mounts["shared"])
        pattern = re.compile("|".join(re.escape(k) + r"(?=/|\b)" for k in env_paths))

        def local_script(text):
            text = pattern.sub(lambda m: env_paths[m.group(0)], text)
            return text.replace("toolpool ", shlex.quote(TOOLPOOL) + " ")
        for k in range(n):
            if os.path.exists(local):
                subprocess.run(["rm", "-rf", local])
            os.makedirs(local)
            p = subprocess.run(["/bin/sh", "-c", local_script(script)], capture_output=True, text=True,
                               env=dict(os.environ, JOB_COMPLETION_INDEX=str(k)), timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run(["/bin/sh", "-c", local_script(mscript)], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        one = self.run_shard("one", None, "one.jsonl")
        self.assertEqual(one.returncode, 1, one.stderr)
        with open(self.path("one.jsonl")) as f:
            a = normalized(l for l in f if json.loads(l).get("id"))
        with open(os.path.join(shared, "results.jsonl")) as f:
            b = normalized(l for l in f if json.loads(l).get("id"))
        self.assertEqual(a, b)


if __name__ == "__main__":
    unittest.main()
