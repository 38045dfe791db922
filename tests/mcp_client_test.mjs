// toolpool mcp against the official MCP TypeScript SDK's client
// (@modelcontextprotocol/sdk, installed into the build directory by
// tests/mcp_sdk_test.sh): the SDK spawns `toolpool mcp` through its
// StdioClientTransport, and everything a host does goes through the SDK.
//
// Environment: TOOLPOOL_BUILD_DIR (the build), TOOLPOOL_NPM_DIR (where the
// SDK is installed), TOOLPOOL_TEST_TOOLS (tests/tools).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { writeRegistry } from './serveutil.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BUILD = process.env.TOOLPOOL_BUILD_DIR ?? path.join(HERE, '..', 'build');
const NPM = process.env.TOOLPOOL_NPM_DIR ?? path.join(BUILD, 'npm');
const TEST_TOOLS = process.env.TOOLPOOL_TEST_TOOLS ?? path.join(HERE, 'tools');
const TOOLPOOL = path.join(BUILD, 'toolpool');
const PLUGIN = path.join(BUILD, 'tests', 'testplugin.so');

// The SDK lives outside this file's tree: its modules are imported by path.
const SDK = path.join(NPM, 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm');
const sdk = (p) => import(pathToFileURL(path.join(SDK, p)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { McpError, ErrorCode, LATEST_PROTOCOL_VERSION } = await sdk('types.js');

const tmp = mkdtempSync(path.join(tmpdir(), 'mcp_client_test.'));
const store = path.join(tmp, 'store');
const registry = path.join(tmp, 'tools.json');
writeRegistry(registry, PLUGIN, [
  { name: 'strict', description: 'Takes a string q.', exec: [path.join(TEST_TOOLS, 'cat.sh')],
    parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
]);

let client, transport, proc, exited, stderr = '';
const clientErrors = [];

before(async () => {
  transport = new StdioClientTransport({
    command: TOOLPOOL,
    args: ['mcp', '--registry', registry, '--store', store, '-j', '1'],
    env: process.env, // the sanitizers' options, under ASan
    stderr: 'pipe',
  });
  transport.stderr.on('data', (d) => { stderr += d; });
  client = new Client({ name: 'toolpool-test', version: '1.0.0' });
  client.onerror = (e) => clientErrors.push(e);
  await client.connect(transport);
  // The exit status, which the transport does not tell: from its child process.
  proc = transport._process;
  exited = new Promise((resolve) => proc.once('exit', (code, sig) => resolve({ code, sig })));
});

after(() => rmSync(tmp, { recursive: true, force: true }));

const toolMessage = (r) => {
  assert.equal(r.isError, true, JSON.stringify(r));
  assert.equal(r.content.length, 1);
  assert.equal(r.content[0].type, 'text');
  const tm = JSON.parse(r.content[0].text);
  assert.deepEqual(r.structuredContent, tm);
  return tm;
};

test('initialize: the newest version, tools and logging, serverInfo', () => {
  assert.equal(LATEST_PROTOCOL_VERSION, '2025-11-25');
  assert.equal(client.getServerVersion().name, 'toolpool');
  const caps = client.getServerCapabilities();
  assert.deepEqual(caps.tools, { listChanged: false });
  assert.deepEqual(caps.logging, {});
  assert.match(client.getInstructions(), /retryable/);
});

test('listTools: the registry, parameters as inputSchema', async () => {
  const { tools, nextCursor } = await client.listTools();
  assert.equal(nextCursor, undefined);
  assert.deepEqual(tools.map((t) => t.name), ['echo', 'sleep', 'deny', 'flaky', 'strict']);
  const strict = tools.find((t) => t.name === 'strict');
  assert.equal(strict.description, 'Takes a string q.');
  assert.deepEqual(strict.inputSchema.properties, { q: { type: 'string' } });
  assert.deepEqual(strict.inputSchema.required, ['q']);
  assert.equal(tools[0].inputSchema.type, 'object');
});

test('callTool: a result as text and as structuredContent', async () => {
  const args = { q: 'refund window', n: [1, 2.5, null], nested: { ok: true } };
  const r = await client.callTool({ name: 'echo', arguments: args });
  assert.equal(r.isError, false);
  assert.deepEqual(r.structuredContent, args);
  assert.deepEqual(JSON.parse(r.content[0].text), args);
  assert.match(r._meta.toolpool.id, /^mcp-[0-9a-f]{16}-\d+$/);
});

test('a failing tool: isError, and the tool message for the model', async () => {
  const tm = toolMessage(await client.callTool({ name: 'deny', arguments: {} }));
  assert.deepEqual([tm.error, tm.class, tm.retryable, tm.attempts], ['PermissionDenied', 'permanent', false, 1]);
  const tm2 = toolMessage(await client.callTool({ name: 'flaky', arguments: { ok_at: 9 } }));
  assert.deepEqual([tm2.error, tm2.retryable, tm2.attempts], ['ServerError', true, 3]);
});

test('a schema violation: InvalidArguments, no attempt', async () => {
  const tm = toolMessage(await client.callTool({ name: 'strict', arguments: { q: 5 } }));
  assert.deepEqual([tm.error, tm.class, tm.attempts], ['InvalidArguments', 'malformed', 0]);
  assert.match(tm.message, /\/q/);
});

test('an unknown tool: a JSON-RPC error, -32602', async () => {
  await assert.rejects(client.callTool({ name: 'ech', arguments: {} }), (e) => {
    assert.ok(e instanceof McpError);
    assert.equal(e.code, ErrorCode.InvalidParams);
    assert.match(e.message, /Unknown tool: ech .*closest: echo/);
    return true;
  });
});

test('progress: one notification per failed attempt', async () => {
  const seen = [];
  const r = await client.callTool({ name: 'flaky', arguments: { ok_at: 3 } }, undefined,
    { onprogress: (p) => seen.push(p) });
  assert.deepEqual(r.structuredContent, { attempt: 3 });
  assert.deepEqual(seen.map((p) => p.progress), [1, 2]);
  assert.match(seen[0].message, /flaky attempt 1: ServerError/);
});

test('cancellation: an aborted call is killed, and answered never', async () => {
  const ac = new AbortController();
  const t0 = Date.now();
  const call = client.callTool({ name: 'sleep', arguments: { ms: 30000 } }, undefined, { signal: ac.signal });
  setTimeout(() => ac.abort('the user pressed stop'), 300);
  await assert.rejects(call);
  // One worker: the next call runs only because the sleeping one was killed.
  const r = await client.callTool({ name: 'echo', arguments: { after: 'cancel' } });
  assert.deepEqual(r.structuredContent, { after: 'cancel' });
  assert.ok(Date.now() - t0 < 10000, `took ${Date.now() - t0}ms`);
  await new Promise((resolve) => setTimeout(resolve, 500));
  // A response for the cancelled request would have been an unknown id to the SDK.
  assert.deepEqual(clientErrors.map(String), []);
});

test('the gateway: the 4th identical failing call is CircuitOpen and escalated', async () => {
  const args = { id: 'r_991' };
  const answers = [];
  for (let i = 0; i < 4; i++) answers.push(toolMessage(await client.callTool({ name: 'deny', arguments: args })));
  assert.deepEqual(answers.map((a) => a.error), ['PermissionDenied', 'PermissionDenied', 'PermissionDenied', 'CircuitOpen']);
  const last = answers[3];
  assert.deepEqual([last.class, last.attempts, last.retryable, last.escalated], ['guard', 0, false, true]);
  assert.match(last.escalation, /^E\d+$/);
  assert.equal(answers[2].escalation, last.escalation);
  const out = execFileSync(TOOLPOOL, ['escalations', 'list', '--store', store], { encoding: 'utf8' });
  assert.ok(out.includes(last.escalation), out);
  assert.ok(out.includes('deny'), out);
});

test("tasks: the SDK's task stream creates one, polls it and fetches its result", async () => {
  assert.deepEqual(client.getServerCapabilities().tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
  const seen = [];
  const stream = client.experimental.tasks.callToolStream({ name: 'echo', arguments: { t: 1 } }, undefined,
    { task: { ttl: 60000 } });
  for await (const m of stream) seen.push(m);
  assert.equal(seen[0].type, 'taskCreated', JSON.stringify(seen));
  assert.equal(seen.at(-1).type, 'result', JSON.stringify(seen));
  assert.deepEqual(seen.at(-1).result.structuredContent, { t: 1 });
  const { taskId } = seen[0].task;
  assert.equal(seen.at(-1).result._meta['io.modelcontextprotocol/related-task'].taskId, taskId);
  const task = await client.experimental.tasks.getTask(taskId);
  assert.deepEqual([task.status, task.ttl], ['completed', 60000]);
  const { tasks } = await client.experimental.tasks.listTasks();
  assert.ok(tasks.some((t) => t.taskId === taskId), JSON.stringify(tasks));
  await assert.rejects(client.experimental.tasks.cancelTask(taskId), (e) => e.code === ErrorCode.InvalidParams);
});

test('close: stdin ends, toolpool mcp drains and exits 0', async () => {
  await client.close();
  const { code, sig } = await exited;
  assert.deepEqual([code, sig], [0, null], stderr);
  assert.match(stderr, /toolpool mcp: stopped: \d+ calls answered/);
  assert.doesNotMatch(stderr, /Sanitizer|runtime error:/);
});
