// The official MCP SDK client (npm @modelcontextprotocol/sdk) over
// streamable HTTP against sandboxd's /mcp, for test_sandboxd_mcp.py.
//
//   node sandboxd_mcp_client.mjs URL TOKEN STEPS_JSON
//
// TOKEN "" sends no Authorization header. The first line is the
// initialize outcome (server version, session id, or the error), then
// one line per step (mcp_client_steps.mjs).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { out, runSteps } from "./mcp_client_steps.mjs";

const [url, token, stepsJson] = process.argv.slice(2);

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
await runSteps(client, transport, JSON.parse(stepsJson));
