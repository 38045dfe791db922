#!/usr/bin/env python3
"""Breakers' history through real `toolpool run` and `toolpool breakers`
processes on a real store: each open and close of a same-call breaker and
a tool breaker is kept with its time, cause and the calls it refused;
`breakers list` puts open and recently tripped breakers first and counts
the other closed call breakers (`--all` lists them); `breakers show`
prints the history, `--json` gives it; a reset is a close of its own.

Standard library only. The build directory comes from $TOOLPOOL_BUILD_DIR
(ctest sets it), else ../build beside this file.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import serveutil

TOOLPOOL = serveutil.TOOLPOOL

DENY = ["sh", "-c", "cat >/dev/null; echo '{\"error\": \"PermissionDenied\", \"message\": \"403: no\"}'"]
DOWN = ["sh", "-c", "cat >/dev/null; exit 75"]


class BreakerHistoryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tp-bhist-")
        self.store = os.path.join(self.dir, "store")
        self.registry = os.path.join(self.dir, "tools.json")
        with open(self.registry, "w") as f:
            json.dump({"tools": [
                {"name": "deny", "exec": DENY, "timeout": "5s"},
                {"name": "down", "exec": DOWN, "timeout": "5s", "attempts": 1,
                 "breaker": {"same_call": False,
                             "tool": {"failure_rate": 0.5, "min_calls": 2, "window": "60s", "cooldown": "1h"}}},
            ]}, f)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_calls(self, calls):
        path = os.path.join(self.dir, "calls.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(c) + "\n" for c in calls)
        p = subprocess.run([TOOLPOOL, "run", "-q", "-j", "1", "-r", self.registry, "-s", self.store, path],
                           capture_output=True, text=True, timeout=60)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return [json.loads(x) for x in p.stdout.splitlines()]

    def breakers(self, *args):
        p = subprocess.run([TOOLPOOL, "breakers", *args, "--store", self.store], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_history_listing_and_reset(self):
        # One call repeated: three failures open its circuit, the next two are refused.
        out = self.run_calls([{"id": f"r{i}", "job": "j", "step": i, "tool": "deny", "args": {"id": 1}}
                              for i in range(1, 6)])
        self.assertEqual([o["error"] for o in out], ["PermissionDenied"] * 3 + ["CircuitOpen"] * 2)
        # Three other calls failing once each: closed call breakers that never opened.
        self.run_calls([{"id": f"o{i}", "tool": "deny", "args": {"id": 100 + i}} for i in range(3)])
        # A tool that is down: two failures open its breaker, the third attempt is refused.
        out = self.run_calls([{"id": f"d{i}", "tool": "down", "args": {"n": i}} for i in range(3)])
        self.assertEqual([o["error"] for o in out], ["ServerError", "ServerError", "CircuitOpen"])

        lines = self.breakers("list").splitlines()
        self.assertEqual(len(lines), 3, lines)
        self.assertRegex(lines[0], r"^call/deny/[0-9a-f]{32} +open +3 failures in job j, opened .*, 2 calls blocked")
        self.assertRegex(lines[1], r"^tool/down +open +.*, 1 attempt refused$")
        self.assertEqual(lines[2], "3 closed call breakers; --all lists them")
        every = self.breakers("list", "--all").splitlines()
        self.assertEqual(len(every), 5, every)
        self.assertTrue(all(" closed " in x and "1 failure" in x for x in every[2:]), every)

        call_id = lines[0].split()[0]
        shown = self.breakers("show", call_id)
        self.assertIn("  history:\n", shown)
        self.assertRegex(shown, r"\n    \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  open +failed 3 times within 600s "
                                r"\(last: PermissionDenied: 403: no\)\n")
        tool = json.loads(self.breakers("show", "tool/down", "--json"))
        self.assertEqual([(h["state"], h["cause"]) for h in tool["history"]],
                         [("open", "2 of 2 attempts failed within 60s (last: ServerError)")])
        self.assertEqual(tool["refused"], 1)

        # A reset is a close: kept, with the calls it refused; listed as recently tripped.
        self.assertIn("reset", self.breakers("reset", call_id))
        hist = json.loads(self.breakers("show", call_id, "--json"))["history"]
        self.assertEqual([(h["state"], h["refused"]) for h in hist], [("open", 0), ("closed", 2)])
        self.assertEqual(hist[1]["cause"], "reset by a person")
        self.assertLessEqual(hist[0]["at_ms"], hist[1]["at_ms"])
        self.assertRegex(self.breakers("show", call_id),
                         r"closed +reset by a person \(2 calls refused while open\)")
        lines = self.breakers("list").splitlines()
        self.assertRegex(lines[0], r"^tool/down +open")
        self.assertRegex(lines[1], r"^call/deny/[0-9a-f]{32} +closed +0 failures in job j$")
        self.assertEqual(lines[2], "3 closed call breakers; --all lists them")
        # Nothing more to reset: as if there were no breaker.
        p = subprocess.run([TOOLPOOL, "breakers", "reset", call_id, "--store", self.store], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        # The same call fails again: a new count, and a second open in the same history.
        out = self.run_calls([{"id": f"s{i}", "job": "j", "step": 10 + i, "tool": "deny", "args": {"id": 1}}
                              for i in range(4)])
        self.assertEqual([o["error"] for o in out], ["PermissionDenied"] * 3 + ["CircuitOpen"])
        hist = json.loads(self.breakers("show", call_id, "--json"))["history"]
        self.assertEqual([h["state"] for h in hist], ["open", "closed", "open"])


if __name__ == "__main__":
    unittest.main()
