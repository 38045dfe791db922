// toolpool serve's /mcp (MCP's Streamable HTTP transport) against the
// official MCP TypeScript SDK's client and its StreamableHTTPClientTransport
// (@modelcontextprotocol/sdk, installed into the build directory by
// tests/mcp_sdk_test.sh), on a loopback port the service picks; and the
// transport's own rules (sessions, status codes, headers) with plain fetch.
//
// Environment: TOOLPOOL_BUILD_DIR (the build), TOOLPOOL_NPM_DIR (where the
// SDK is installed).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { Serve, writeRegistry } from './serveutil.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BUILD = process.env.TOOLPOOL_BUILD_DIR ?? path.join(HERE, '..', 'build');
const NPM = process.env.TOOLPOOL_NPM_DIR ?? path.join(BUILD, 'npm');
const TOOLPOOL = path.join(BUILD, 'toolpool');
const PLUGIN = path.join(BUILD, 'tests', 'testplugin.so');

const SDK = path.join(NPM, 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm');
const sdk = (p) => import(pathToFileURL(path.join(SDK, p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { McpError, ErrorCode, LoggingMessageNotificationSchema } = await sdk('types.js');

const tmp = mkdtempSync(path.join(tmpdir(), 'mcp_http_client_test.'));
const store = path.join(tmp, 'store');
const registry = path.join(tmp, 'tools.json');
writeRegistry(registry, PLUGIN, [
  { name: 'report', mcp: { command: ['python3', path.join(HERE, 'mcp_tiny_server.py')], tool: 'report' } },
]);

let serve, url;

before(async () => {
  serve = new Serve(TOOLPOOL, ['--registry', registry, '--store', store, '-j', '2']);
  url = await serve.started();
});

after(async () => {
  await serve.stop('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

const connect = async () => {
  const client = new Client({ name: 'toolpool-http-test', version: '1.0.0' });
  const errors = [];
  client.onerror = (e) => errors.push(e);
  const transport = new StreamableHTTPClientTransport(url);
  await client.connect(transport);
  return { client, transport, errors };
};

const toolMessage = (r) => {
  assert.equal(r.isError, true, JSON.stringify(r));
  const tm = JSON.parse(r.content[0].text);
  assert.deepEqual(r.structuredContent, tm);
  return tm;
};

test('the SDK over HTTP: initialize, list, call, failure, schema, unknown tool, progress', async () => {
  const { client, transport, errors } = await connect();
  assert.match(transport.sessionId, /^[0-9a-f]{16}$/);
  assert.equal(client.getServerVersion().name, 'toolpool');
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ['echo', 'sleep', 'deny', 'flaky', 'report']);

  const args = { q: 'refund window', n: [1, 2.5, null] };
  const r = await client.callTool({ name: 'echo', arguments: args });
  assert.equal(r.isError, false);
  assert.deepEqual(r.structuredContent, args);
  // The job is the session; the step counts up in it.
  assert.equal(r._meta.toolpool.job, `mcp-${transport.sessionId}`);
  assert.equal(r._meta.toolpool.step, 1);

  const tm = toolMessage(await client.callTool({ name: 'deny', arguments: {} }));
  assert.deepEqual([tm.error, tm.class, tm.retryable, tm.attempts], ['PermissionDenied', 'permanent', false, 1]);

  const bad = toolMessage(await client.callTool({ name: 'sleep', arguments: { ms: 'soon' } }));
  assert.deepEqual([bad.error, bad.class, bad.attempts], ['InvalidArguments', 'malformed', 0]);
  assert.match(bad.message, /\/ms/);

  await assert.rejects(client.callTool({ name: 'ech', arguments: {} }), (e) => {
    assert.ok(e instanceof McpError);
    assert.equal(e.code, ErrorCode.InvalidParams);
    return true;
  });

  // Progress rides the call's own event stream, before its response.
  const seen = [];
  const ok = await client.callTool({ name: 'flaky', arguments: { ok_at: 3 } }, undefined,
    { onprogress: (p) => seen.push(p) });
  assert.deepEqual(ok.structuredContent, { attempt: 3 });
  assert.deepEqual(seen.map((p) => p.progress), [1, 2]);

  // An mcp tool's own server: its progress and log messages ride the same stream.
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
  await client.setLoggingLevel('info');
  const told = [];
  const rep = await client.callTool({ name: 'report', arguments: { steps: 2 } }, undefined,
    { onprogress: (p) => told.push(p) });
  assert.deepEqual(rep.content, [{ type: 'text', text: 'reported 2' }]);
  assert.deepEqual(told.map((p) => [p.progress, p.total, p.message]), [[1, 2, 'step 1'], [2, 2, 'step 2']]);
  assert.deepEqual(logs, [{ level: 'info', logger: 'tiny', data: 'report: 2 steps' }]);

  await transport.terminateSession();
  await client.close();
  assert.deepEqual(errors.map(String), []);
});

test('cancellation over HTTP: the aborted call is killed, the next one runs', async () => {
  const { client, transport } = await connect();
  const ac = new AbortController();
  const t0 = Date.now();
  const calls = [0, 1].map(() => client.callTool({ name: 'sleep', arguments: { ms: 30000 } }, undefined,
    { signal: ac.signal }));
  setTimeout(() => ac.abort('the user pressed stop'), 300);
  for (const c of calls) await assert.rejects(c);
  // Two workers, both were sleeping: this runs only because they were killed.
  const r = await client.callTool({ name: 'echo', arguments: { after: 'cancel' } });
  assert.deepEqual(r.structuredContent, { after: 'cancel' });
  assert.ok(Date.now() - t0 < 15000, `took ${Date.now() - t0}ms`);
  await transport.terminateSession();
  await client.close();
});

test('two sessions at once: each its own job and steps', async () => {
  const a = await connect(), b = await connect();
  assert.notEqual(a.transport.sessionId, b.transport.sessionId);
  const [ra, rb] = await Promise.all([a.client.callTool({ name: 'echo', arguments: { s: 'a' } }),
    b.client.callTool({ name: 'echo', arguments: { s: 'b' } })]);
  assert.equal(ra._meta.toolpool.job, `mcp-${a.transport.sessionId}`);
  assert.equal(rb._meta.toolpool.job, `mcp-${b.transport.sessionId}`);
  assert.deepEqual([ra._meta.toolpool.step, rb._meta.toolpool.step], [1, 1]);
  for (const x of [a, b]) {
    await x.transport.terminateSession();
    await x.client.close();
  }
});

test('the gateway over HTTP: the 4th identical failing call is CircuitOpen and escalated', async () => {
  const { client, transport } = await connect();
  const args = { id: 'r_http' };
  const answers = [];
  for (let i = 0; i < 4; i++) answers.push(toolMessage(await client.callTool({ name: 'deny', arguments: args })));
  assert.deepEqual(answers.map((a) => a.error), ['PermissionDenied', 'PermissionDenied', 'PermissionDenied', 'CircuitOpen']);
  assert.equal(answers[3].escalated, true);
  const out = execFileSync(TOOLPOOL, ['escalations', 'list', '--store', store], { encoding: 'utf8' });
  assert.ok(out.includes(answers[3].escalation), out);
  await transport.terminateSession();
  await client.close();
});

// The transport's rules, with plain requests.
const post = (body, headers = {}, signal = undefined) => fetch(url, {
  method: 'POST',
  signal,
  headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});
const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };

test('the transport: session ids, 202, 400, 404, 405, 403, DELETE', async () => {
  const r1 = await post(init);
  assert.equal(r1.status, 200);
  assert.equal(r1.headers.get('content-type'), 'application/json');
  const sid = r1.headers.get('mcp-session-id');
  assert.match(sid, /^[0-9a-f]{16}$/);
  assert.equal((await r1.json()).result.protocolVersion, '2025-06-18');
  const h = { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' };

  // A notification: 202, no body.
  const r2 = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, h);
  assert.equal(r2.status, 202);
  assert.equal(await r2.text(), '');
  // A request without a session, other than initialize: 400.
  const r3 = await post({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
  assert.equal(r3.status, 400);
  assert.equal((await r3.json()).error.code, -32600);
  // Not JSON: 400 with a Parse error.
  const r4 = await post('{"jsonrpc":', h);
  assert.equal(r4.status, 400);
  assert.equal((await r4.json()).error.code, -32700);
  // An unknown protocol version: 400.
  const r5 = await post({ jsonrpc: '2.0', id: 3, method: 'ping' }, { ...h, 'MCP-Protocol-Version': '1999-01-01' });
  assert.equal(r5.status, 400);
  // An unknown method: 200 with the JSON-RPC error.
  const r6 = await post({ jsonrpc: '2.0', id: 4, method: 'resources/list' }, h);
  assert.equal(r6.status, 200);
  assert.equal((await r6.json()).error.code, -32601);
  // A tools/call from a client that takes only JSON: the response as JSON.
  const r7 = await post({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'echo', arguments: { j: 1 } } },
    { ...h, Accept: 'application/json' });
  assert.equal(r7.status, 200);
  assert.equal(r7.headers.get('content-type'), 'application/json');
  assert.deepEqual((await r7.json()).result.structuredContent, { j: 1 });
  // From one that takes an event stream: the response as an event.
  const r8 = await post({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'echo', arguments: { j: 2 } } }, h);
  assert.equal(r8.status, 200);
  assert.equal(r8.headers.get('content-type'), 'text/event-stream');
  const events = (await r8.text()).split('\n\n').filter((e) => e.trim());
  assert.equal(events.length, 1);
  const msg = JSON.parse(events[0].split('\n').find((l) => l.startsWith('data: ')).slice(6));
  assert.equal(msg.id, 6);
  assert.deepEqual(msg.result.structuredContent, { j: 2 });
  // No stream on GET.
  const r9 = await fetch(url, { headers: { Accept: 'text/event-stream', ...h } });
  assert.equal(r9.status, 405);
  await r9.text();
  // A page of another origin: 403.
  const r10 = await post({ jsonrpc: '2.0', id: 7, method: 'ping' }, { ...h, Origin: 'http://evil.example' });
  assert.equal(r10.status, 403);
  await r10.text();
  // DELETE ends the session; after it, 404.
  const r11 = await fetch(url, { method: 'DELETE', headers: h });
  assert.equal(r11.status, 204);
  const r12 = await post({ jsonrpc: '2.0', id: 8, method: 'ping' }, h);
  assert.equal(r12.status, 404);
  await r12.text();
});

test('a client gone mid-call: the call runs on and is recorded', async () => {
  const r1 = await post(init);
  const sid = r1.headers.get('mcp-session-id');
  await r1.text();
  const h = { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' };
  const ac = new AbortController();
  const pending = post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'sleep', arguments: { ms: 300 } } },
    h, ac.signal).then((r) => r.text());
  // Abort the HTTP request itself (not an MCP cancellation) once it is in.
  await new Promise((resolve) => setTimeout(resolve, 100));
  ac.abort();
  await pending.catch(() => {});
  const deadline = Date.now() + 15000;
  let out = '';
  while (Date.now() < deadline) {
    try {
      out = execFileSync(TOOLPOOL, ['trace', '--store', store, `mcp-${sid}-1`], { encoding: 'utf8', stdio: 'pipe' });
      break;
    } catch (e) {
      out = String(e.stdout ?? '') + String(e.stderr ?? ''); // not recorded yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.match(out, /sleep/);
});

test('a cancelled call: its request\'s stream ends with no response (204 for a client of JSON only)', async () => {
  const r1 = await post(init);
  const sid = r1.headers.get('mcp-session-id');
  await r1.text();
  const h = { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' };
  const call = (id, accept) => post({ jsonrpc: '2.0', id, method: 'tools/call',
    params: { name: 'sleep', arguments: { ms: 20000 } } }, { ...h, Accept: accept });
  const streamed = call(1, 'application/json, text/event-stream');
  const plain = call(2, 'application/json');
  await new Promise((resolve) => setTimeout(resolve, 300));
  for (const requestId of [1, 2]) {
    const r = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId, reason: 'no' } }, h);
    assert.equal(r.status, 202);
    await r.text();
  }
  const [s, p] = await Promise.all([streamed, plain]);
  assert.equal(s.status, 200);
  assert.equal(s.headers.get('content-type'), 'text/event-stream');
  assert.equal(await s.text(), '');
  assert.equal(p.status, 204);
  assert.equal(await p.text(), '');
});

test('SIGTERM: serve drains and exits 0', async () => {
  const { code, sig } = await serve.stop('SIGTERM');
  assert.deepEqual([code, sig], [0, null], serve.log);
  assert.doesNotMatch(serve.log, /Sanitizer|runtime error:/);
});
