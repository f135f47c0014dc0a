// The official MCP SDK client (npm @modelcontextprotocol/sdk) over
// streamable HTTP against sandboxd's /mcp, for test_sandboxd_mcp.py.
//
//   node sandboxd_mcp_client.mjs URL TOKEN STEPS_JSON
//
// TOKEN "" sends no Authorization header. Runs the steps in order and
// prints one JSON line per step:
//   {"op": "list"}                          -> the tools
//   {"op": "call", "name", "arguments"}     -> the result, or {"error"}
//   {"op": "ping"}
//   {"op": "terminate"}: DELETE /mcp (ends the session)
// The first line is the initialize outcome (server version, session id).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, stepsJson] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const headers = token ? { Authorization: `Bearer ${token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url),
  { requestInit: { headers } });
const client = new Client({ name: "sandboxd-mcp-test", version: "1.0.0" });
try {
  await client.connect(transport);
} catch (e) {
  out({ op: "initialize", error: String(e.message ?? e), code: e.code ?? null });
  process.exit(0);
}
out({ op: "initialize", version: client.getServerVersion(),
      session: transport.sessionId ?? null,
      protocol: transport.protocolVersion ?? null,
      instructions: client.getInstructions() });

for (const step of JSON.parse(stepsJson)) {
  try {
    if (step.op === "list") {
      out({ op: "list", result: await client.listTools() });
    } else if (step.op === "ping") {
      out({ op: "ping", result: await client.ping() });
    } else if (step.op === "call") {
      out({ op: "call", result: await client.callTool(
        { name: step.name, arguments: step.arguments }) });
    } else if (step.op === "terminate") {
      await transport.terminateSession();
      out({ op: "terminate", session: transport.sessionId ?? null });
    }
  } catch (e) {
    out({ op: step.op, error: String(e.message ?? e), code: e.code ?? null });
  }
}
await client.close();
out({ op: "closed" });
