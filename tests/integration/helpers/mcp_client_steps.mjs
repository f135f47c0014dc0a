// The steps both MCP test clients run with the npm SDK's Client, one
// JSON line printed per step (sandbox_mcp_client.mjs over stdio,
// sandboxd_mcp_client.mjs over streamable HTTP):
//   {"op": "list"}                          -> the tools
//   {"op": "call", "name", "arguments"}     -> the result, or {"error"}
//   {"op": "ping"}
//   {"op": "cancel", "name", "arguments", "after_ms"}: starts the call,
//       aborts it (the SDK sends notifications/cancelled)
//   {"op": "hang", "name", "arguments"}: starts the call, prints
//       {"pid": the server's pid (stdio)} and waits to be killed
//   {"op": "terminate"}: ends the session (streamable HTTP: DELETE)
// then closes the client and prints {"op": "closed"}.
export const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

export async function runSteps(client, transport, steps) {
  for (const step of steps) {
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
        const p = client.callTool(
          { name: step.name, arguments: step.arguments }, undefined,
          { signal: ac.signal });
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
}
