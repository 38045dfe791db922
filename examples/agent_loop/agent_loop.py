#!/usr/bin/env python3
"""An agent loop on toolpool serve, resumable after a crash at any point.

Several jobs run side by side, one thread each. A job is a conversation: a
task, then turns of a model that asks for a tool call, the tool's answer,
and so on, until the model gives its final answer. After each step the loop
stores the job's checkpoint in toolpool (its step and its message list);
started again, it resumes every job at the step after its checkpoint.

    python3 examples/agent_loop/agent_loop.py --addr unix:/tmp/tp.sock --jobs 4 --steps 5

The model is a scripted stand-in (no network, no weights): ScriptedModel
picks each job's next tool call from the job's name and the messages so far,
the same way every time. Its tools are the example plugin's echo and noop
(build/examples/tools.json). Each step's arguments carry a digest of the
answer before, so a job resumed with the wrong history would ask for other
arguments, and toolpool would refuse the recorded id (409, "recorded for
other input") rather than answer it.

Why nothing runs twice: step N of job J is the call with id "J.N". The
loop checkpoints only after the call's answer, so a crash between the two
resumes J at step N again; it asks for the same id, and toolpool answers it
from its store without running the tool. A crash of toolpool itself while
the call runs: the client sends the request again (same id) once toolpool
is back, and the call, never recorded, runs then.

Output, one line per event, for people and for tests:
    start JOB                      a job with no checkpoint
    resume JOB STEP                a job resumed: STEP is the step it runs next
    step JOB STEP TOOL ok|ERROR    a step's answer (checkpoint follows)
    done JOB STEPS                 the final answer, after STEPS tool steps
    error JOB STATUS ERROR "MSG"   toolpool refused a request of the job (ToolpoolError)

Exit status: 0 when every job gave its final answer, 1 when a job stopped on
an error from toolpool (ToolpoolError), 2 for a usage error.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from toolpool_client import Client, ToolpoolError  # noqa: E402

_print_lock = threading.Lock()


def emit(*words):
    with _print_lock:
        print(*words, flush=True)


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class ScriptedModel:
    """A deterministic stand-in for the model.

    Job number i (from the end of its name) takes steps + i % 3 tool steps.
    Step k calls noop when k is a multiple of 3, else echo with a note; the
    arguments name the job and the step and carry a digest of the last
    message, so they depend on the whole history. After the last tool step
    the model answers with a summary of the tool answers it saw.
    """

    def __init__(self, steps, think=0.0):
        self.steps = steps
        self.think = think

    def steps_of(self, job):
        digits = "".join(c for c in job if c.isdigit())
        return self.steps + (int(digits[-3:]) % 3 if digits else 0)

    def next(self, job, messages):
        """The next assistant message: a tool call or the final answer."""
        if self.think:
            time.sleep(self.think)
        done = sum(1 for m in messages if m["role"] == "tool")
        if done >= self.steps_of(job):
            seen = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
            notes = [s.get("note") for s in seen if isinstance(s, dict) and "note" in s]
            return {"role": "assistant",
                    "content": f"{job}: finished after {done} tool calls; notes: {'; '.join(notes)}"}
        k = done + 1
        args = {"job": job, "step": k, "after": digest(messages[-1].get("content") or
                                                      json.dumps(messages[-1], sort_keys=True))}
        if k % 3 == 0:
            tool = "noop"
        else:
            tool = "echo"
            args["note"] = f"{job} looked at item {k * 7 % 11}"
        return {"role": "assistant", "tool_calls": [{
            "id": f"{job}.{k}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args, sort_keys=True)}}]}


def tool_message(r):
    """What the model sees of a result record: the answer, or the error as
    data (the seed's tool message)."""
    if r["ok"]:
        return json.dumps(r["result"], sort_keys=True)
    return json.dumps({"error": r["error"], "retryable": r["retryable"], "attempts": r["attempts"],
                       "message": r.get("message", "")}, sort_keys=True)


def run_job(tp, model, job, stall=None):
    """Runs job to its final answer, from its checkpoint if it has one."""
    cp = tp.checkpoint_get(job)
    if cp is None:
        step = 0
        state = {"task": f"Work through the checklist of {job}.", "done": False,
                 "messages": [{"role": "user", "content": f"Work through the checklist of {job}."}]}
        emit("start", job)
    else:
        step, state = cp["step"], cp["state"]
        if state.get("done"):
            emit("done", job, step)
            return
        emit("resume", job, step + 1)
    messages = state["messages"]
    while True:
        move = model.next(job, messages)
        messages.append(move)
        if "tool_calls" not in move:
            state["done"] = True
            tp.checkpoint_put(job, step, state)
            emit("done", job, step)
            return
        call = move["tool_calls"][0]
        step += 1
        r = tp.call(call["function"]["name"], json.loads(call["function"]["arguments"]),
                    job=job, step=step, id=call["id"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_message(r)})
        emit("step", job, step, call["function"]["name"], "ok" if r["ok"] else r["error"])
        if stall == (job, step):
            # For tests: stop between a step's answer and its checkpoint, so
            # a kill lands where a rerun must not run the step again.
            emit("stalled", job, step)
            while True:
                time.sleep(3600)
        tp.checkpoint_put(job, step, state)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=os.environ.get("TOOLPOOL_ADDR", "unix:./toolpool.sock"),
                    help="toolpool serve's address (default: $TOOLPOOL_ADDR, else unix:./toolpool.sock)")
    ap.add_argument("--token-file", help="the token serve was given with --token-file")
    ap.add_argument("--jobs", type=int, default=4, help="jobs to run side by side (default 4)")
    ap.add_argument("--steps", type=int, default=5,
                    help="tool steps of the first job; job i takes steps + i %% 3 (default 5)")
    ap.add_argument("--prefix", default="job", help="jobs are named PREFIX-0, PREFIX-1, ...")
    ap.add_argument("--think", type=float, default=0.0, help="seconds the model takes per turn")
    ap.add_argument("--stall", metavar="JOB:STEP",
                    help="(tests) stop JOB after STEP's answer, before its checkpoint")
    ap.add_argument("--print-transcripts", action="store_true",
                    help="print each job's message list at the end")
    a = ap.parse_args()
    stall = None
    if a.stall:
        job, _, s = a.stall.rpartition(":")
        stall = (job, int(s))
    token = None
    if a.token_file:
        with open(a.token_file) as f:
            token = f.read().strip()
    tp = Client(a.addr, token=token)
    model = ScriptedModel(a.steps, a.think)
    jobs = [f"{a.prefix}-{i}" for i in range(a.jobs)]
    failed = []

    def worker(job):
        try:
            run_job(tp, model, job, stall)
        except ToolpoolError as e:
            emit("error", job, e.status, e.error, json.dumps(e.message))
            failed.append(job)

    threads = [threading.Thread(target=worker, args=(j,), name=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if a.print_transcripts:
        for job in jobs:
            cp = tp.checkpoint_get(job)
            print(json.dumps({"job": job, "step": cp and cp["step"],
                              "messages": cp and cp["state"]["messages"]}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
