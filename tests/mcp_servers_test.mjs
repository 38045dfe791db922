// The mcp adapter against real MCP servers from npm (installed into the
// build directory by tests/mcp_servers_test.sh): the reference servers
// @modelcontextprotocol/server-everything and server-filesystem as tools of
// a registry, through `toolpool run`; then the gateway chain, `toolpool
// mcp` fronting server-everything through the adapter, driven by the
// official SDK's client.
//
// Environment: TOOLPOOL_BUILD_DIR (the build), TOOLPOOL_NPM_DIR (the npm folder).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BUILD = process.env.TOOLPOOL_BUILD_DIR ?? path.join(HERE, '..', 'build');
const NPM = process.env.TOOLPOOL_NPM_DIR ?? path.join(BUILD, 'npm');
const TOOLPOOL = path.join(BUILD, 'toolpool');
const MODULES = path.join(NPM, 'node_modules', '@modelcontextprotocol');
const EVERYTHING = [process.execPath, path.join(MODULES, 'server-everything', 'dist', 'index.js'), 'stdio'];
const FILESYSTEM = [process.execPath, path.join(MODULES, 'server-filesystem', 'dist', 'index.js')];
const sdk = (p) => import(pathToFileURL(path.join(MODULES, 'sdk', 'dist', 'esm', p)).href);

const tmp = mkdtempSync(path.join(tmpdir(), 'mcp_servers_test.'));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;

const defaults = { timeout: '60s', backoff: { base: '20ms', jitter: 'none' } };
const ev = (name, tool, policy = {}) => ({ name, mcp: { command: EVERYTHING, tool }, ...policy });

// Runs calls through `toolpool run` on a fresh store; the results by id, the
// exit status and stderr. onStart, if given, gets the child process.
async function run(registry, calls, { j = 1, onStart } = {}) {
  const dir = path.join(tmp, `run${++n}`);
  mkdirSync(dir);
  writeFileSync(path.join(dir, 'tools.json'), JSON.stringify(registry));
  writeFileSync(path.join(dir, 'calls.jsonl'), calls.map((c) => JSON.stringify(c)).join('\n') + '\n');
  const child = spawn(TOOLPOOL, ['run', '--registry', path.join(dir, 'tools.json'), '--store', path.join(dir, 'store'),
    '-j', String(j), path.join(dir, 'calls.jsonl')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  const done = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  if (onStart) await onStart(child);
  const code = await done;
  const results = {};
  for (const line of out.split('\n').filter(Boolean)) {
    const r = JSON.parse(line);
    results[r.id] = r;
  }
  return { results, code, stderr: err };
}

// The live processes descended from pid whose command line holds needle.
function descendants(pid, needle) {
  const parent = new Map();
  const cmd = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] === 'Z') continue;
      parent.set(Number(d), Number(fields[1]));
      cmd.set(Number(d), readFileSync(`/proc/${d}/cmdline`, 'utf8'));
    } catch { /* gone */ }
  }
  const under = (p) => { for (let q = p; q > 1; q = parent.get(q)) if (q === pid) return true; return false; };
  return [...cmd.keys()].filter((p) => p !== pid && under(p) && cmd.get(p).includes(needle));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (r) => r.result.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n');

test('server-everything: results, structuredContent, and isError classified', async () => {
  const { results: r, code, stderr } = await run({ defaults, tools: [
    ev('echo', 'echo'), ev('sum', 'get-sum'), ev('weather', 'get-structured-content'), ev('nosuch', 'no-such-tool'),
  ] }, [
    { id: 'echo', tool: 'echo', args: { message: 'hello pool' } },
    { id: 'sum', tool: 'sum', args: { a: 19, b: 23 } },
    { id: 'weather', tool: 'weather', args: { location: 'Chicago' } },
    // no parameters declared here: the server checks them, and answers isError
    { id: 'badsum', tool: 'sum', args: { a: 1, b: 'x' } },
    { id: 'nosuch', tool: 'nosuch', args: {} },
  ]);
  assert.equal(code, 1, stderr);
  assert.deepEqual(r.echo.result, { content: [{ type: 'text', text: 'Echo: hello pool' }] });
  assert.match(text(r.sum), /42/);
  assert.equal(typeof r.weather.result.structuredContent, 'object');
  assert.ok('temperature' in r.weather.result.structuredContent, JSON.stringify(r.weather.result));
  // the SDK's "MCP error -32602: ..." in an isError result reads as that error
  assert.deepEqual([r.badsum.error, r.badsum.attempts], ['BadArguments', 1]);
  assert.match(r.badsum.message, /-32602/);
  assert.deepEqual([r.nosuch.error, r.nosuch.attempts], ['BadArguments', 1]);
  assert.match(r.nosuch.message, /no-such-tool not found/);
  // its stderr went to the log, with the tool's name, not into a result
  assert.match(stderr, /toolpool-worker: \w+: Starting default \(STDIO\) server/);
});

test('server-everything: a timeout cancels the request, and the server goes on serving', async () => {
  const { results: r, stderr } = await run({ defaults, tools: [
    ev('echo', 'echo'), ev('long', 'trigger-long-running-operation', { timeout: '1500ms', attempts: 1 }),
  ] }, [
    { id: 'a', job: 'j', step: 1, tool: 'echo', args: { message: 'before' } },
    { id: 'long', job: 'j', step: 2, tool: 'long', args: { duration: 60, steps: 2 } },
    { id: 'b', job: 'j', step: 3, tool: 'echo', args: { message: 'after' } },
  ]);
  assert.equal(r.long.error, 'Timeout');
  assert.equal(text(r.b), 'Echo: after');
  // the request was cancelled (notifications/cancelled) and the server answered the next call: one start
  assert.equal(stderr.match(/Starting default \(STDIO\) server/g).length, 1, stderr);
});

test('server-everything: a server killed mid-call is WorkerCrashed, and the retry answers', async () => {
  let killed = 0;
  const { results: r, stderr } = await run({ defaults, tools: [
    ev('long', 'trigger-long-running-operation', { attempts: 2 }),
  ] }, [{ id: 'long', tool: 'long', args: { duration: 4, steps: 2 } }], {
    onStart: async (child) => {
      // The server is up before its call is sent, and the call takes 4s after
      // that: a kill one second after the server appears lands inside the attempt.
      for (let i = 0; i < 600 && killed === 0; i++) {
        const pids = descendants(child.pid, 'server-everything');
        if (pids.length) {
          await sleep(1000);
          for (const p of pids) process.kill(p, 'SIGKILL');
          killed = pids.length;
        } else {
          await sleep(50);
        }
      }
    },
  });
  assert.ok(killed > 0, 'the server was never seen');
  assert.deepEqual(r.long.trace.map((t) => t.outcome), ['WorkerCrashed', 'ok'], stderr);
  assert.match(text(r.long), /Long running operation completed/);
});

test('server-filesystem imported with mcp_servers: its tools run, access outside its root is ToolError', async () => {
  const root = path.join(tmp, 'root');
  mkdirSync(root);
  writeFileSync(path.join(root, 'notes.txt'), 'refund window: 30 days\n');
  const { results: r, code, stderr } = await run({
    defaults, tools: [],
    mcp_servers: { fs: { command: [...FILESYSTEM, root], tools: { write_file: { idempotent: false } } } },
  }, [
    { id: 'read', tool: 'fs.read_text_file', args: { path: path.join(root, 'notes.txt') } },
    { id: 'list', tool: 'fs.list_directory', args: { path: root } },
    { id: 'write', tool: 'fs.write_file', args: { path: path.join(root, 'new.txt'), content: 'x' } },
    { id: 'outside', tool: 'fs.read_text_file', args: { path: '/etc/hostname' } },
    { id: 'schema', tool: 'fs.read_text_file', args: { path: 7 } },
  ]);
  assert.equal(code, 1, stderr);
  assert.equal(text(r.read), 'refund window: 30 days\n');
  assert.deepEqual(r.read.result.structuredContent, { content: 'refund window: 30 days\n' });
  assert.match(text(r.list), /\[FILE\] notes\.txt/);
  assert.ok(r.write.ok, JSON.stringify(r.write));
  assert.equal(readFileSync(path.join(root, 'new.txt'), 'utf8'), 'x');
  assert.deepEqual([r.outside.error, r.outside.class, r.outside.attempts], ['ToolError', 'permanent', 1]);
  assert.match(r.outside.message, /Access denied/);
  // the imported inputSchema is the tool's parameters: checked before any call
  assert.deepEqual([r.schema.error, r.schema.attempts], ['InvalidArguments', 0]);
});

test('an import that fails: the registry error names the server and quotes its stderr', () => {
  const dir = path.join(tmp, 'badimport');
  mkdirSync(dir);
  const reg = path.join(dir, 'tools.json');
  // server-filesystem refuses to start on a directory that does not exist
  writeFileSync(reg, JSON.stringify({ tools: [], mcp_servers: { fs: { command: [...FILESYSTEM, '/nonexistent/root'] } } }));
  writeFileSync(path.join(dir, 'calls.jsonl'), '');
  let e;
  try {
    execFileSync(TOOLPOOL, ['run', '--registry', reg, '--store', path.join(dir, 'store'), path.join(dir, 'calls.jsonl')],
      { encoding: 'utf8', stdio: 'pipe' });
  } catch (x) { e = x; }
  assert.ok(e, 'the run should fail');
  assert.equal(e.status, 2);
  assert.match(e.stderr, /mcp_servers\.fs: cannot import the tools of MCP server "fs"/);
  assert.match(e.stderr, /its stderr: ".*nonexistent/);
});

test('the gateway: toolpool mcp fronting server-everything; a repeated failure opens the breaker and escalates', async () => {
  const { Client } = await sdk('client/index.js');
  const { StdioClientTransport } = await sdk('client/stdio.js');
  const dir = path.join(tmp, 'gateway');
  mkdirSync(dir);
  const store = path.join(dir, 'store');
  writeFileSync(path.join(dir, 'tools.json'), JSON.stringify({
    defaults, tools: [ev('sum', 'get-sum')], mcp_servers: { ev: { command: EVERYTHING } },
  }));
  const transport = new StdioClientTransport({
    command: TOOLPOOL, args: ['mcp', '--registry', path.join(dir, 'tools.json'), '--store', store, '-j', '2'],
    env: process.env, stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (d) => { stderr += d; });
  const client = new Client({ name: 'toolpool-gateway-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    assert.ok(names.includes('ev.echo') && names.includes('ev.get-sum') && names.includes('sum'), names.join(' '));
    assert.deepEqual(tools.find((t) => t.name === 'ev.echo').inputSchema.required, ['message']);

    const ok = await client.callTool({ name: 'ev.echo', arguments: { message: 'through the pool' } });
    assert.notEqual(ok.isError, true, JSON.stringify(ok));
    assert.match(JSON.stringify(ok.content), /Echo: through the pool/);

    // The server's own progress notifications reach the host, under the host's token.
    const seen = [];
    const long = await client.callTool({ name: 'ev.trigger-long-running-operation', arguments: { duration: 0.3, steps: 3 } },
      undefined, { onprogress: (p) => seen.push(p) });
    assert.notEqual(long.isError, true, JSON.stringify(long));
    assert.match(JSON.stringify(long.content), /Long running operation completed/);
    assert.deepEqual(seen.map((p) => [p.progress, p.total]), [[1, 3], [2, 3], [3, 3]]);

    const args = { a: 1, b: 'not a number' };
    const answers = [];
    for (let i = 0; i < 4; i++) {
      const r = await client.callTool({ name: 'sum', arguments: args });
      assert.equal(r.isError, true, JSON.stringify(r));
      answers.push(r.structuredContent);
    }
    assert.deepEqual(answers.map((a) => a.error), ['BadArguments', 'BadArguments', 'BadArguments', 'CircuitOpen']);
    const last = answers[3];
    assert.deepEqual([last.attempts, last.escalated], [0, true]);
    const out = execFileSync(TOOLPOOL, ['escalations', 'list', '--store', store], { encoding: 'utf8' });
    assert.ok(out.includes(last.escalation), out);
    assert.ok(out.includes('sum'), out);
  } finally {
    await client.close();
  }
  assert.doesNotMatch(stderr, /Sanitizer|runtime error:/);
});
