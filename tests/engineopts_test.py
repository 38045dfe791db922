#!/usr/bin/env python3
"""The engine options that `toolpool run`, `serve` and `mcp` share
(tools/host.c): each command, given each option with a bad value,
must say the same thing and exit 2, so the three cannot drift apart. Then
the start-up they share (a registry, a policy or a store that cannot be
opened), and each option listed in each command's --help.

Real `toolpool` processes, a temporary directory; standard library only.
The build directory comes from $TOOLPOOL_BUILD_DIR (ctest sets it), else
../build beside this file.
"""
import json
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TOOLPOOL_BUILD_DIR", os.path.join(HERE, "..", "build"))
TOOLPOOL = os.path.join(BUILD, "toolpool")
COMMANDS = ("run", "serve", "mcp")
U64 = "18446744073709551615"

# (arguments, the message on stderr after "toolpool: error: ")
BAD_VALUES = [
    (["-j", "0"], '-j: expected an integer in [1, 4096], got "0"'),
    (["--workers", "4097"], '-j: expected an integer in [1, 4096], got "4097"'),
    (["--workers=-1"], '-j: expected an integer in [1, 4096], got "-1"'),
    (["-j", "2x"], '-j: expected an integer in [1, 4096], got "2x"'),
    (["--recycle-after", "0"], '--recycle-after: expected an integer in [1, %s], got "0"' % U64),
    (["--recycle-after", "1e3"], '--recycle-after: expected an integer in [1, %s], got "1e3"' % U64),
    (["--pipeline", "0"], '--pipeline: expected an integer in [1, 64], got "0"'),
    (["--pipeline", "65"], '--pipeline: expected an integer in [1, 64], got "65"'),
    (["--max-frame", "1023"], '--max-frame: expected an integer in [1024, 1073741824], got "1023"'),
    (["--max-frame", "1073741825"], '--max-frame: expected an integer in [1024, 1073741824], got "1073741825"'),
    (["--max-args", "1"], '--max-args: expected an integer in [2, 1073741824], got "1"'),
    (["--max-args", "big"], '--max-args: expected an integer in [2, 1073741824], got "big"'),
    (["--drain", "soon"], '--drain: expected a duration like "10s", got "soon"'),
    (["--drain", "-1s"], '--drain: expected a duration like "10s", got "-1s"'),
    (["--seed", "0"], '--seed: expected an integer in [1, %s], got "0"' % U64),
    (["--seed", "18446744073709551616"], '--seed: expected an integer in [1, %s], got "18446744073709551616"' % U64),
    (["--seed="], '--seed: expected an integer in [1, %s], got ""' % U64),
    (["--on-version-change", "ask"], '--on-version-change: expected rerun, serve or refuse, got "ask"'),
]

# Options that take a value, given none; options that take none, given one:
# getopt's words, then the command's usage.
GETOPT_ERRORS = [
    (["--seed"], "option '--seed' requires an argument"),
    (["-j"], "option requires an argument -- 'j'"),
    (["--policy"], "option '--policy' requires an argument"),
    (["--relaxed=yes"], "option '--relaxed' doesn't allow an argument"),
    (["--quiet=1"], "option '--quiet' doesn't allow an argument"),
]

# Each shared option, as each command's --help must list it.
SHARED = ["-r, --registry FILE", "--policy FILE", "-s, --store DIR", "-j, --workers N", "--relaxed",
          "--recycle-after N", "--pipeline N", "--max-frame BYTES", "--max-args BYTES", "--drain DURATION",
          "--seed N", "--on-version-change", "-q, --quiet", "-h, --help"]


class EngineOptions(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="toolpool-opts-")
        self.dir = self.tmp.name
        self.registry = os.path.join(self.dir, "tools.json")
        with open(self.registry, "w") as f:
            json.dump({"tools": [{"name": "echo", "exec": ["cat"]}]}, f)

    def tearDown(self):
        self.tmp.cleanup()

    def toolpool(self, cmd, args):
        """Runs `toolpool CMD ARGS` in the temporary directory: (status, stdout, stderr)."""
        p = subprocess.run([TOOLPOOL, cmd] + args, cwd=self.dir, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def same_from_all(self, args):
        """The stderr all three commands give for args, checked equal, with exit 2 and nothing on stdout."""
        seen = {}
        for cmd in COMMANDS:
            status, out, err = self.toolpool(cmd, args)
            self.assertEqual(status, 2, "%s %s: exit %d, stderr %r" % (cmd, args, status, err))
            self.assertEqual(out, "", "%s %s" % (cmd, args))
            seen[cmd] = err
        self.assertEqual(seen["serve"], seen["run"], args)
        self.assertEqual(seen["mcp"], seen["run"], args)
        return seen["run"]

    def test_bad_values(self):
        for args, want in BAD_VALUES:
            with self.subTest(args=args):
                self.assertEqual(self.same_from_all(["-r", self.registry] + args), "toolpool: error: %s\n" % want)

    def test_bad_value_after_good_ones(self):
        # The bad value is found wherever it stands among good ones.
        args = ["-r", self.registry, "-j", "2", "--relaxed", "--pipeline", "8", "--seed", "7", "--max-args", "0", "-q"]
        self.assertEqual(self.same_from_all(args),
                         'toolpool: error: --max-args: expected an integer in [2, 1073741824], got "0"\n')

    def test_getopt_errors(self):
        for args, want in GETOPT_ERRORS:
            with self.subTest(args=args):
                for cmd in COMMANDS:
                    status, out, err = self.toolpool(cmd, args)
                    self.assertEqual(status, 2, "%s %s" % (cmd, args))
                    lines = err.splitlines()
                    self.assertEqual(lines[0], "%s: %s" % (cmd, want))
                    self.assertEqual(lines[1].split(" [")[0], "usage: toolpool %s" % cmd)

    def test_registry_that_cannot_be_read(self):
        missing = os.path.join(self.dir, "missing.json")
        err = self.same_from_all(["-r", missing])
        self.assertEqual(err, "toolpool: error: %s: cannot read: No such file or directory\n" % missing)

    def test_run_frees_what_it_parsed_on_a_start_up_error(self):
        # run's own --retry-failed LIST is held while the start-up fails (a
        # sanitized build fails this on a leak).
        missing = os.path.join(self.dir, "missing.json")
        for args in (["-r", missing], ["-r", self.registry, "a.jsonl", "b.jsonl"],
                     ["-r", self.registry, "-s", os.path.join(self.dir, "s"), "missing.jsonl"]):
            status, out, err = self.toolpool("run", ["--retry-failed=Timeout,transient"] + args)
            self.assertEqual(status, 2, err)
            self.assertTrue(err.startswith("toolpool: error: "), err)
            self.assertNotIn("LeakSanitizer", err)

    def test_registry_that_is_not_json(self):
        bad = os.path.join(self.dir, "bad.json")
        with open(bad, "w") as f:
            f.write('{"tools": [\n')
        err = self.same_from_all(["--registry", bad])
        self.assertTrue(err.startswith("toolpool: error: %s:" % bad), err)

    def test_policy_that_cannot_be_read(self):
        missing = os.path.join(self.dir, "policy.json")
        err = self.same_from_all(["-r", self.registry, "--policy", missing])
        self.assertIn(missing, err)
        self.assertTrue(err.startswith("toolpool: error: "), err)

    def test_policy_for_a_tool_not_in_the_registry(self):
        policy = os.path.join(self.dir, "policy.json")
        with open(policy, "w") as f:
            json.dump({"run": {"nosuch": {"exec": ["cat"]}}}, f)
        err = self.same_from_all(["-r", self.registry, "--policy", policy])
        self.assertIn("nosuch", err)

    def test_store_that_cannot_be_opened(self):
        store = os.path.join(self.dir, "store")
        with open(store, "w") as f:
            f.write("not a store\n")
        err = self.same_from_all(["-r", self.registry, "--relaxed", "-s", store])
        self.assertIn(store, err)
        self.assertTrue(err.startswith("toolpool: error: "), err)

    def test_help_lists_every_shared_option(self):
        for cmd in COMMANDS:
            status, out, err = self.toolpool(cmd, ["--help"])
            self.assertEqual(status, 0, cmd)
            self.assertEqual(err, "", cmd)
            for opt in SHARED:
                self.assertIn("  " + opt + " ", out, "%s --help lacks %s" % (cmd, opt))


if __name__ == "__main__":
    unittest.main(verbosity=2)
