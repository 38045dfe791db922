// The worker side of the workerpool peer (bench/peers/workerpool_bench.js):
// a child process (workerType: 'process') that serves two methods.
//
//   noop(args)  returns {} at once
//   hang()      blocks its thread for an hour: a call that never returns and
//               does not cooperate, like the /bin/sleep 3600 toolpool runs
'use strict';
const workerpool = require('workerpool');

function noop(args) {
  return {};
}

function hang() {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3600e3);
  return null;
}

workerpool.worker({ noop, hang });
