#!/usr/bin/env node
// An MCP server over stdio made with the TypeScript SDK's v2 server
// (@modelcontextprotocol/server, pinned in tests/mcp_sdk2_test.sh and
// installed into build/npm-sdk2), for mcp_sdk2_server_test.py. It is the
// SDK's serveStdio, which takes the era from the client's first message: a
// request carrying the 2026-07-28 _meta envelope (server/discover, say)
// makes the connection modern, initialize or a request without the envelope
// legacy. Legacy clients are refused unless SDK2_LEGACY is "serve", so a
// client that gets an answer at all spoke 2026-07-28 to it.
//
// Tools: echo {text}, era (the era the SDK chose for this connection), pid,
// sleep {seconds}, confirm (answers input_required, asking for an
// elicitation, as a tool that needs the user does).
//
// Environment: TOOLPOOL_SDK2_NPM_DIR (the npm folder, default
// build/npm-sdk2), SDK2_LOG (a file "era ERA" is appended to for each
// connection's instance), SDK2_LEGACY ("reject", the default, or "serve").
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const NPM = process.env.TOOLPOOL_SDK2_NPM_DIR ?? path.join(HERE, '..', 'build', 'npm-sdk2');
const dist = path.join(NPM, 'node_modules', '@modelcontextprotocol', 'server', 'dist');
const { McpServer, fromJsonSchema, inputRequired } = await import(pathToFileURL(path.join(dist, 'index.mjs')).href);
const { serveStdio } = await import(pathToFileURL(path.join(dist, 'stdio.mjs')).href);

const note = (line) => {
    if (process.env.SDK2_LOG) appendFileSync(process.env.SDK2_LOG, line + '\n');
};
const schema = (properties = {}, required = []) => fromJsonSchema({ type: 'object', properties, required });
const text = (t) => ({ content: [{ type: 'text', text: String(t) }] });

serveStdio(
    ({ era }) => {
        note(`era ${era}`);
        const server = new McpServer({ name: 'sdk2-test-server', version: '1.0.0' }, { capabilities: { tools: {} } });
        server.registerTool(
            'echo',
            { description: 'Echoes text back.', inputSchema: schema({ text: { type: 'string' } }, ['text']) },
            async ({ text: t }) => text(t)
        );
        server.registerTool('era', { description: 'The era of this connection.', inputSchema: schema() }, async () =>
            text(era)
        );
        server.registerTool('pid', { description: 'Its process id.', inputSchema: schema() }, async () =>
            text(process.pid)
        );
        server.registerTool(
            'sleep',
            { description: 'Sleeps.', inputSchema: schema({ seconds: { type: 'number' } }) },
            async ({ seconds }) => {
                await new Promise((resolve) => setTimeout(resolve, (seconds ?? 1) * 1000));
                return text('slept');
            }
        );
        server.registerTool('confirm', { description: 'Asks the user first.', inputSchema: schema() }, async () =>
            inputRequired({
                inputRequests: {
                    confirm: inputRequired.elicit({
                        message: 'Go ahead?',
                        requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } } }
                    })
                }
            })
        );
        server.registerTool('again', { description: 'Asks to be called again with its state.', inputSchema: schema() }, async () =>
            inputRequired({ requestState: 'round-2' })
        );
        return server;
    },
    {
        legacy: process.env.SDK2_LEGACY ?? 'reject',
        onerror: (e) => process.stderr.write(`sdk2 server: ${e.message}\n`)
    }
);
