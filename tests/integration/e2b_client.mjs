// E2B's SDKs (npm e2b, @e2b/code-interpreter), unmodified, against
// sandboxd, for test_sandboxd_e2b.py and tools/bench/e2b.sh:
//
//   E2B_API_URL=http://H:P/e2b E2B_SANDBOX_URL=http://H:P E2B_API_KEY=...
//       node e2b_client.mjs STEPS_JSON
//
// One JSON line per step: {"op", "ok": result} or {"op", "error": {"name",
// "message", "statusCode"}} (the SDK's error class is what a test checks).
// Sandboxes made or connected by a step are kept under the step's "as"
// (default "sb") for later steps. Steps:
//   {"op": "create", "template"?, "opts"?, "ci"?: true (the code
//       interpreter's Sandbox)}           -> {sandboxId, envdVersion, secure}
//   {"op": "connect", "id"?, "opts"?, "ci"?}  (id: else the sandbox of "sb")
//   {"op": "info", "id"?}                 -> getInfo, dates as ISO text
//   {"op": "list", "query"?, "limit"?}    -> [[ids of a page]...], every page
//   {"op": "list_info", "query"?}         -> the first page's items
//   {"op": "set_timeout", "ms"}  {"op": "kill", "id"?}  {"op": "pause"}
//   {"op": "is_running"}  {"op": "metrics"}  {"op": "forget"}: drop "sb"
//   {"op": "raw", "method", "path", "body"?, "key"?} -> {status, body}: the
//       control API by fetch, for what the SDK never sends
//   {"op": "wait_gone", "id"?}: getInfo until the sandbox is not found
// Steps name their sandbox with "sb" (a name given by "as").
import { Sandbox } from "e2b";
import { Sandbox as CiSandbox } from "@e2b/code-interpreter";

const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const boxes = {};

function errorOf(e) {
  return {
    name: e?.constructor?.name ?? "Error",
    message: String(e?.message ?? e),
    statusCode: e?.statusCode ?? null,
  };
}

const dates = (o) => JSON.parse(JSON.stringify(o));

async function listPages(query, limit) {
  const pages = [];
  const paginator = Sandbox.list({ query, limit });
  while (paginator.hasNext) {
    pages.push((await paginator.nextItems()).map((s) => s.sandboxId));
  }
  return pages;
}

const ops = {
  async create(step) {
    const cls = step.ci ? CiSandbox : Sandbox;
    const sb = step.template !== undefined
      ? await cls.create(step.template, step.opts ?? {})
      : await cls.create(step.opts ?? {});
    boxes[step.as ?? "sb"] = sb;
    return { sandboxId: sb.sandboxId, secure: !!sb.envdAccessToken };
  },
  async connect(step) {
    const cls = step.ci ? CiSandbox : Sandbox;
    const id = step.id ?? boxes[step.sb ?? "sb"].sandboxId;
    const sb = await cls.connect(id, step.opts ?? {});
    boxes[step.as ?? "sb"] = sb;
    return { sandboxId: sb.sandboxId, secure: !!sb.envdAccessToken };
  },
  async info(step) {
    return dates(await Sandbox.getInfo(step.id ?? boxes[step.sb ?? "sb"]
      .sandboxId));
  },
  async list(step) {
    return await listPages(step.query, step.limit);
  },
  async list_info(step) {
    return dates(await Sandbox.list({ query: step.query }).nextItems());
  },
  async set_timeout(step) {
    await boxes[step.sb ?? "sb"].setTimeout(step.ms);
    return null;
  },
  async kill(step) {
    return step.id !== undefined ? await Sandbox.kill(step.id)
      : await boxes[step.sb ?? "sb"].kill();
  },
  async pause(step) {
    return await boxes[step.sb ?? "sb"].pause();
  },
  async is_running(step) {
    return await boxes[step.sb ?? "sb"].isRunning();
  },
  async metrics(step) {
    return dates(await boxes[step.sb ?? "sb"].getMetrics());
  },
  async forget(step) {
    delete boxes[step.sb ?? "sb"];
    return null;
  },
  async raw(step) {
    const r = await fetch(process.env.E2B_API_URL + step.path, {
      method: step.method,
      headers: { "X-API-Key": step.key ?? process.env.E2B_API_KEY,
                 "Content-Type": "application/json" },
      body: step.body !== undefined ? JSON.stringify(step.body) : undefined,
    });
    const text = await r.text();
    let body = text;
    try { body = JSON.parse(text); } catch { /* text */ }
    return { status: r.status, body, next: r.headers.get("X-Next-Token") };
  },
  async wait_gone(step) {
    const id = step.id ?? boxes[step.sb ?? "sb"].sandboxId;
    for (;;) {
      try {
        await Sandbox.getInfo(id);
      } catch (e) {
        return errorOf(e);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  },
};

for (const step of JSON.parse(process.argv[2])) {
  try {
    out({ op: step.op, ok: (await ops[step.op](step)) ?? null });
  } catch (e) {
    out({ op: step.op, error: errorOf(e) });
  }
}
