// The workerpool peer of bench/run: Node's workerpool with child-process
// workers (workerType: 'process') and a per-call .timeout().
//
//   node workerpool_bench.js noop N WORKERS       no-op calls, timeout 5 s each
//   node workerpool_bench.js hang N WORKERS MS    calls that never return
//
// Prints one JSON object on stdout.
//
// noop: the clock runs from creating the pool to the pool terminated, around
// N calls of a method that returns {}, each submitted with .timeout(5000).
//
// hang: each call blocks its worker for an hour. Its deadline is the moment
// workerpool starts the call's timer (when it hands the task to a worker: the
// pool calls the promise's timeout() then, and this script wraps it to note
// the time) plus the timeout; its result time is when the call's promise
// rejects. The figure is result minus deadline, in microseconds: the same span
// as toolpool's attempt duration minus its timeout. workerpool rejects the
// promise when its timer fires, then gives the worker workerTerminateTimeout
// (1 s by default) to clean up before it kills it: the seconds figure shows
// what that costs the pool.
'use strict';
const path = require('path');
const workerpool = require('workerpool');

const WORKER = path.join(__dirname, 'workerpool_worker.js');

function newPool(workers) {
  return workerpool.pool(WORKER, { minWorkers: workers, maxWorkers: workers, workerType: 'process' });
}

async function benchNoop(n, workers) {
  const t0 = process.hrtime.bigint();
  const pool = newPool(workers);
  const calls = new Array(n);
  for (let i = 0; i < n; i++) calls[i] = pool.exec('noop', [{}]).timeout(5000);
  await Promise.all(calls);
  await pool.terminate();
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  return { calls: n, workers, seconds: secs, calls_per_s: n / secs };
}

async function benchHang(n, workers, timeoutMs) {
  const armed = new Array(n).fill(0n);
  const done = new Array(n).fill(0n);
  let timeouts = 0;
  const t0 = process.hrtime.bigint();
  const pool = newPool(workers);
  const calls = [];
  for (let i = 0; i < n; i++) {
    const p = pool.exec('hang', []);
    // Called once by us, and again by the pool when it dispatches a queued
    // task: the last call is the one that starts the timer.
    const timeout = p.timeout;
    p.timeout = function (delay) {
      armed[i] = process.hrtime.bigint();
      return timeout.call(this, delay);
    };
    calls.push(p.timeout(timeoutMs).then(
      () => { done[i] = process.hrtime.bigint(); },
      (err) => {
        done[i] = process.hrtime.bigint();
        if (err instanceof workerpool.Promise.TimeoutError) timeouts++;
      }));
  }
  await Promise.all(calls);
  await pool.terminate(true);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const deadlineNs = BigInt(Math.round(timeoutMs * 1e6));
  const late = [];
  for (let i = 0; i < n; i++) late.push(Number(done[i] - armed[i] - deadlineNs) / 1e3);
  late.sort((a, b) => a - b);
  return { calls: n, workers, timeouts, seconds: secs, late_us: late };
}

async function main() {
  const [mode, n, workers, ms] = process.argv.slice(2);
  let out;
  if (mode === 'noop' && workers) out = await benchNoop(Number(n), Number(workers));
  else if (mode === 'hang' && ms) out = await benchHang(Number(n), Number(workers), Number(ms));
  else {
    process.stderr.write('usage: workerpool_bench.js noop N WORKERS | hang N WORKERS MS\n');
    process.exit(2);
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => { process.stderr.write(`${err.stack}\n`); process.exit(1); });
