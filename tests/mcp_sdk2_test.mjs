// toolpool against the MCP TypeScript SDK's v2 client (@modelcontextprotocol/client,
// installed into the build by tests/mcp_sdk2_test.sh), over stdio (`toolpool mcp`)
// and over HTTP (serve's /mcp), as a host built on it would use them: it
// negotiates 2025-11-25 with toolpool (and, pinned to it, 2026-07-28), lists the tools with what their
// servers declared (title, annotations, outputSchema), calls them, hears
// progress, cancels a call (recorded Cancelled) and names a call with
// _meta.id (answered from the store the second time).
//
// Environment: TOOLPOOL_BUILD_DIR (the build), TOOLPOOL_SDK2_NPM_DIR (where
// the client is installed).
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
const NPM = process.env.TOOLPOOL_SDK2_NPM_DIR ?? path.join(BUILD, 'npm-sdk2');
const TOOLPOOL = path.join(BUILD, 'toolpool');
const PLUGIN = path.join(BUILD, 'tests', 'testplugin.so');

const pkg = path.join(NPM, 'node_modules', '@modelcontextprotocol', 'client', 'dist');
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(pkg, 'index.mjs')).href);
const { StdioClientTransport } = await import(pathToFileURL(path.join(pkg, 'stdio.mjs')).href);

const tmp = mkdtempSync(path.join(tmpdir(), 'mcp_sdk2_test.'));
const registry = path.join(tmp, 'tools.json');
writeRegistry(registry, PLUGIN, [], {
  mcp_servers: { tiny: { command: ['python3', path.join(HERE, 'mcp_tiny_server.py')] } },
});

let serve, url;
before(async () => {
  serve = new Serve(TOOLPOOL, ['--registry', registry, '--store', path.join(tmp, 'http-store'), '-j', '2']);
  url = await serve.started();
});

after(async () => {
  const { code } = await serve.stop('SIGTERM');
  assert.equal(code, 0, serve.log);
  assert.doesNotMatch(serve.log, /Sanitizer|runtime error:/);
  rmSync(tmp, { recursive: true, force: true });
});

const toolMessage = (r) => {
  assert.equal(r.isError, true, JSON.stringify(r));
  const tm = JSON.parse(r.content[0].text);
  assert.deepEqual(r.structuredContent, tm);
  return tm;
};

// What both transports must do alike; store is where the calls are recorded.
const exercise = async (client, store, version = '2025-11-25') => {
  assert.equal(client.getNegotiatedProtocolVersion(), version);
  assert.equal(client.getServerVersion().name, 'toolpool');

  // The tools, with what the imported server declared of its own
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(tools.slice(0, 4).map((t) => t.name), ['echo', 'sleep', 'deny', 'flaky']);
  assert.equal(byName['tiny.echo'].title, 'Echo');
  assert.deepEqual(byName['tiny.echo'].annotations, { readOnlyHint: true, openWorldHint: false });
  assert.equal(byName['tiny.echo'].outputSchema.type, 'object');
  assert.deepEqual(byName['tiny.write'].annotations, { destructiveHint: true, idempotentHint: false });

  // A call, a failure, and an mcp tool's structured answer (checked against its outputSchema by the client)
  const args = { q: 'refund window', n: [1, 2.5, null] };
  const r = await client.callTool({ name: 'echo', arguments: args });
  assert.equal(r.isError, false);
  assert.deepEqual(r.structuredContent, args);
  const tm = toolMessage(await client.callTool({ name: 'deny', arguments: {} }));
  assert.deepEqual([tm.error, tm.class, tm.retryable, tm.attempts], ['PermissionDenied', 'permanent', false, 1]);
  const e = await client.callTool({ name: 'tiny.echo', arguments: { text: 'hi' } });
  assert.deepEqual(e.structuredContent, { text: 'hi' });

  // Progress while toolpool retries
  const seen = [];
  const ok = await client.callTool({ name: 'flaky', arguments: { ok_at: 3 } }, { onprogress: (p) => seen.push(p) });
  assert.deepEqual(ok.structuredContent, { attempt: 3 });
  assert.deepEqual(seen.map((p) => p.progress), [1, 2]);

  // A call named with _meta.id: the second time it is answered from the store
  const count = `sdk2-count-${version}`;
  const first = await client.callTool({ name: 'tiny.counter', arguments: {}, _meta: { id: count } });
  const again = await client.callTool({ name: 'tiny.counter', arguments: {}, _meta: { id: count } });
  assert.deepEqual(again.structuredContent, first.structuredContent);
  assert.deepEqual(again._meta.toolpool, first._meta.toolpool);

  // The host gives up on a call (its AbortSignal): toolpool records it Cancelled
  const abort = new AbortController();
  const cancel = `sdk2-cancel-${version}`;
  const gone = client.callTool({ name: 'sleep', arguments: { ms: 30000 }, _meta: { id: cancel } },
    { signal: abort.signal });
  await new Promise((resolve) => setTimeout(resolve, 300));
  abort.abort('the user stopped it');
  await assert.rejects(gone);
  let trace = '';
  const until = Date.now() + 10000;
  while (!/Cancelled/.test(trace) && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    try {
      trace = execFileSync(TOOLPOOL, ['trace', cancel, '--store', store], { encoding: 'utf8' });
    } catch { /* not recorded yet */ }
  }
  assert.match(trace, /Cancelled/);
  const back = toolMessage(await client.callTool({ name: 'sleep', arguments: { ms: 30000 },
    _meta: { id: cancel } }));
  assert.equal(back.error, 'Cancelled');
};

// 2026-07-28, as a client pinned to it speaks it: server/discover, no
// initialize, each request on its own (over HTTP, no session; a closed
// stream is the cancellation). By default the client speaks 2025-11-25.
const MODERN = { versionNegotiation: { mode: { pin: '2026-07-28' } } };

const overStdio = async (store, options, version) => {
  const transport = new StdioClientTransport({ command: TOOLPOOL,
    args: ['mcp', '-q', '--registry', registry, '--store', store, '-j', '2'], stderr: 'pipe' });
  let err = '';
  transport.stderr.on('data', (d) => { err += d; });
  const client = new Client({ name: 'toolpool-sdk2-test', version: '1.0.0' }, options);
  await client.connect(transport);
  await exercise(client, store, version);
  await client.close();
  assert.doesNotMatch(err, /Sanitizer|runtime error:/);
};

const overHttp = async (options, version) => {
  const client = new Client({ name: 'toolpool-sdk2-test', version: '1.0.0' }, options);
  const errors = [];
  client.onerror = (e) => errors.push(e);
  const transport = new StreamableHTTPClientTransport(url);
  await client.connect(transport);
  assert.equal(transport.sessionId === undefined, version === '2026-07-28');
  await exercise(client, path.join(tmp, 'http-store'), version);
  if (transport.sessionId !== undefined)
    await transport.terminateSession();
  await client.close();
  assert.deepEqual(errors.map(String), []);
};

test('the v2 client over stdio: toolpool mcp', () => overStdio(path.join(tmp, 'stdio-store'), {}, '2025-11-25'));
test('the v2 client over HTTP: serve\'s /mcp', () => overHttp({}, '2025-11-25'));
test('the v2 client speaking 2026-07-28 over stdio',
  () => overStdio(path.join(tmp, 'stdio-modern-store'), MODERN, '2026-07-28'));
test('the v2 client speaking 2026-07-28 over HTTP: serve\'s /mcp without a session',
  () => overHttp(MODERN, '2026-07-28'));
