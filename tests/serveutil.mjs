// One `toolpool serve` on a loopback port it picks, for the Node tests of
// its /mcp: started, its port read from its startup line, stopped.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';

// Writes a registry of the test plugin's four tools (echo, sleep, deny,
// flaky) with quick retries, then the given tools and any other keys
// (mcp_servers...), for the Node tests of `toolpool mcp` and `serve`.
export function writeRegistry(file, pluginPath, tools = [], rest = {}) {
  const plugin = { path: pluginPath };
  writeFileSync(file, JSON.stringify({
    defaults: { timeout: '30s', backoff: { base: '20ms', jitter: 'none' } },
    tools: [
      { name: 'echo', description: 'Returns its args.', plugin },
      { name: 'sleep', description: 'Sleeps args.ms milliseconds.', plugin,
        parameters: { type: 'object', properties: { ms: { type: 'integer' } }, required: ['ms'] } },
      { name: 'deny', description: 'Always forbidden (403).', plugin },
      { name: 'flaky', plugin, attempts: 3 },
      ...tools,
    ],
    ...rest,
  }));
}

export class Serve {
  // toolpool: the binary; args: after `serve` (registry, store...), --listen added.
  constructor(toolpool, args) {
    this.log = '';
    this.proc = spawn(toolpool, ['serve', ...args, '--listen', '127.0.0.1:0'],
      { env: process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout.on('data', (d) => { this.log += d; });
    this.proc.stderr.on('data', (d) => { this.log += d; });
  }

  // Waits for its startup line: its /mcp URL.
  async started() {
    const deadline = Date.now() + 20000;
    while (!/listening on (127\.0\.0\.1:\d+)/.test(this.log)) {
      assert.ok(Date.now() < deadline, `serve did not start:\n${this.log}`);
      assert.equal(this.proc.exitCode, null, `serve exited:\n${this.log}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    this.url = new URL(`http://${this.log.match(/listening on (127\.0\.0\.1:\d+)/)[1]}/mcp`);
    return this.url;
  }

  // {code, sig} once it has exited.
  exited() {
    const p = this.proc;
    return new Promise((resolve) => {
      if (p.exitCode !== null || p.signalCode !== null) resolve({ code: p.exitCode, sig: p.signalCode });
      else p.once('exit', (code, sig) => resolve({ code, sig }));
    });
  }

  // Sends sig unless it has exited; {code, sig} once it has.
  async stop(sig = 'SIGTERM') {
    if (this.proc.exitCode === null && this.proc.signalCode === null)
      this.proc.kill(sig);
    return this.exited();
  }
}
