// The MCP peer of bench/run: the official TypeScript SDK's client calling
// one tool of an MCP server it starts over stdio, as a host does.
//
//   node mcp_bench.mjs N CONCURRENCY TOOL ARGS_JSON -- COMMAND [ARG...]
//
// N calls of TOOL with ARGS_JSON; CONCURRENCY of them outstanding at once
// (1: one after the other). Each concurrent lane names its own job in
// _meta.job, so a server that runs one job's calls in order (toolpool mcp)
// may run the lanes at once; other servers ignore it. The clock runs from
// the first call to the last answer (the server's start and handshake, and
// a warm-up of a few calls a lane, are not in it). Prints one JSON object: calls, seconds, calls_per_s, and the
// latency percentiles p50_us and p99_us.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MODULES = process.env.TOOLPOOL_BENCH_MODULES ?? path.join(HERE, '..', 'node_modules');
const sdkRoot = path.join(MODULES, '@modelcontextprotocol', 'sdk');
const sdk = (p) => import(pathToFileURL(path.join(sdkRoot, 'dist', 'esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
if (sep !== 4 || argv.length < 6) {
  process.stderr.write('usage: mcp_bench.mjs N CONCURRENCY TOOL ARGS_JSON -- COMMAND [ARG...]\n');
  process.exit(2);
}
let n = Number(argv[0]);
const conc = Number(argv[1]), tool = argv[2], args = JSON.parse(argv[3]);
const [command, ...cargs] = argv.slice(5);

const transport = new StdioClientTransport({ command, args: cargs, env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'toolpool-bench', version: '1.0.0' });
await client.connect(transport);

const lat = [];
let next = 0, failed = 0;
const lane = async (k) => {
  while (next < n) {
    next++;
    const t0 = process.hrtime.bigint();
    const r = await client.callTool({ name: tool, arguments: args, _meta: { job: `lane-${k}` } });
    lat.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (r.isError) failed++;
  }
};
// Warm up, untimed: every lane's first calls (a worker of toolpool starts
// its server on its first call of the tool).
const total = n;
n = Math.max(4, conc) * 4;
await Promise.all(Array.from({ length: Math.max(4, conc) }, (_, k) => lane(k)));
next = 0;
failed = 0;
lat.length = 0;
n = total;
const t0 = process.hrtime.bigint();
await Promise.all(Array.from({ length: conc }, (_, k) => lane(k)));
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
await client.close();
if (failed) {
  process.stderr.write(`mcp_bench: ${failed} of ${n} calls failed\n`);
  process.exit(1);
}
lat.sort((a, b) => a - b);
const pct = (p) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))];
process.stdout.write(JSON.stringify({ calls: n, concurrency: conc, seconds: secs, calls_per_s: n / secs,
  p50_us: pct(50), p99_us: pct(99) }) + '\n');
