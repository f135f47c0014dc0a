// The official MCP SDK client (npm @modelcontextprotocol/sdk) over stdio
// against sandbox-mcp, for test_sandbox_mcp.py.
//
//   node sandbox_mcp_client.mjs SANDBOX_MCP_BIN ARGS_JSON ENV_JSON STEPS_JSON
//
// Runs the steps in order and prints one JSON line per step:
//   {"op": "list"}                          -> the tools
//   {"op": "call", "name", "arguments"}     -> the result, or {"error"}
//   {"op": "ping"}
//   {"op": "cancel", "name", "arguments", "after_ms"}: starts the call,
//       aborts it (the SDK sends notifications/cancelled)
//   {"op": "hang", "name", "arguments"}: starts the call, prints
//       {"pid": sandbox-mcp's pid} and waits for the test to kill us
// The first line is the initialize outcome (server version and info).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, argsJson, envJson, stepsJson] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

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

for (const step of JSON.parse(stepsJson)) {
  try {
    if (step.op === "list") {
      out({ op: "list", result: await client.listTools() });
    } else if (step.op === "ping") {
      out({ op: "ping", result: await client.ping() });
    } else if (step.op === "call") {
      out({ op: "call", result: await client.callTool(
        { name: step.name, arguments: step.arguments }) });
    } else if (step.op === "cancel") {
      const ac = new AbortController();
      const p = client.callTool({ name: step.name, arguments: step.arguments },
                                undefined, { signal: ac.signal });
      setTimeout(() => ac.abort("test cancels"), step.after_ms);
      try {
        await p;
        out({ op: "cancel", error: null });
      } catch (e) {
        out({ op: "cancel", error: String(e) });
      }
    } else if (step.op === "hang") {
      client.callTool({ name: step.name, arguments: step.arguments })
        .catch(() => {});
      out({ op: "hang", pid: transport.pid });
      await new Promise(() => {});
    }
  } catch (e) {
    out({ op: step.op, error: String(e.message ?? e), code: e.code ?? null });
  }
}
await client.close();
out({ op: "closed" });
