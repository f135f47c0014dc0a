// The official MCP SDK client (npm @modelcontextprotocol/sdk) over stdio
// against sandbox-mcp, for test_sandbox_mcp.py.
//
//   node sandbox_mcp_client.mjs SANDBOX_MCP_BIN ARGS_JSON ENV_JSON STEPS_JSON
//
// The first line is the initialize outcome (server version and info),
// then one line per step (mcp_client_steps.mjs).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { out, runSteps } from "./mcp_client_steps.mjs";

const [bin, argsJson, envJson, stepsJson] = process.argv.slice(2);

const transport = new StdioClientTransport({
  command: bin,
  args: JSON.parse(argsJson),
  env: JSON.parse(envJson),
  stderr: "inherit",
});
const client = new Client({ name: "sandbox-mcp-test", version: "1.0.0" });
await client.connect(transport);
out({ op: "initialize", version: client.getServerVersion(),
      protocol: transport._protocolVersion ?? null,
      instructions: client.getInstructions() });
await runSteps(client, transport, JSON.parse(stepsJson));
