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
//   {"op": "update_network", "network"}: updateNetwork(network)
//   {"op": "raw", "method", "path", "body"?, "key"?} -> {status, body}: the
//       control API by fetch, for what the SDK never sends
//   {"op": "wait_gone", "id"?}: getInfo until the sandbox is not found
//   {"op": "run", "cmd", "opts"?}        -> {exitCode, stdout, stderr}
//   {"op": "run_streamed"}: a command that prints, then waits for a file
//       the client writes only once it has seen that output (buffered
//       output would never finish it)  -> {stdout, seen}
//   {"op": "background", "cmd", "as"?, "opts"?} -> {pid}; the handle kept
//       (E2B ends a command at its timeoutMs, 60 s by default; 0: never)
//   {"op": "ps"}                         -> pids of commands.list()
//   {"op": "kill_pid", "pid"?, "handle"?} -> bool, then the handle's end
//   {"op": "stdin", "text"}: cat in the background, sendStdin, closeStdin
//   {"op": "pty"}: a PTY session: stty size, resize, stty size, exit
//   {"op": "write_bytes", "path", "size", "seed"} {"op": "read_sha",
//       "path"} -> sha256 of what was written / read
//   {"op": "write", "path", "text", "opts"?} {"op": "read", "path",
//       "opts"?} {"op": "exists", "path"} {"op": "list_dir", "path"}
//   {"op": "watch", "dir", "file"}: watchDir, then a write in it ->
//       the events seen
//   {"op": "signed_urls", "path", "text"}: uploadUrl() and downloadUrl()
//       fetched with no header of the SDK's
//   {"op": "run_code", "code", "opts"?}  -> the Execution (ci sandboxes)
//   {"op": "contexts"}: create, use, list, restart, remove a context
// Steps name their sandbox with "sb" (a name given by "as").
import { createHash } from "node:crypto";
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
const box = (step) => boxes[step.sb ?? "sb"];
const handles = {};
const sha = (b) => createHash("sha256").update(b).digest("hex");

// size bytes from a seed, every byte value among them.
function bytes(size, seed) {
  const b = Buffer.alloc(size);
  let x = seed >>> 0;
  for (let i = 0; i < size; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    b[i] = i < 256 ? i : x >>> 24;
  }
  return b;
}

function result(r) {
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr,
           error: r.error ?? null };
}

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
  async update_network(step) {
    await boxes[step.sb ?? "sb"].updateNetwork(step.network);
    return null;
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
  async run(step) {
    try {
      return result(await box(step).commands.run(step.cmd, step.opts ?? {}));
    } catch (e) {
      if (e.exitCode !== undefined) return { ...result(e), thrown: e.name };
      throw e;
    }
  },
  async run_streamed(step) {
    const sb = box(step);
    const seen = [];
    let told = null;
    const r = await sb.commands.run(
      "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second",
      { onStdout: (d) => {
        seen.push(d);
        if (told === null && d.includes("first")) {
          told = sb.files.write("/tmp/go", "go");
        }
      } });
    await told;
    return { stdout: r.stdout, seen };
  },
  async background(step) {
    const h = await box(step).commands.run(step.cmd,
      { ...(step.opts ?? {}), background: true });
    handles[step.as ?? "h"] = h;
    return { pid: h.pid };
  },
  async ps(step) {
    return (await box(step).commands.list()).map((p) => p.pid);
  },
  async kill_pid(step) {
    const h = handles[step.handle ?? "h"];
    const killed = await box(step).commands.kill(step.pid ?? h.pid);
    let end = null;
    try {
      await h.wait();
    } catch (e) {
      end = { name: e.name, exitCode: e.exitCode ?? null,
              error: e.error ?? null };
    }
    return { killed, end };
  },
  async stdin(step) {
    const sb = box(step);
    const h = await sb.commands.run("cat", { background: true, stdin: true });
    await sb.commands.sendStdin(h.pid, step.text);
    await sb.commands.closeStdin(h.pid);
    return result(await h.wait());
  },
  async pty(step) {
    const sb = box(step);
    let text = "";
    const waitFor = async (re) => {
      for (let i = 0; i < 600 && !re.test(text); i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      return re.test(text);
    };
    const h = await sb.pty.create({ cols: 80, rows: 24, timeoutMs: 60000,
      onData: (d) => { text += Buffer.from(d).toString(); } });
    const enc = (t) => new TextEncoder().encode(t);
    await sb.pty.sendInput(h.pid, enc("stty size; echo A$((6*7))\n"));
    const before = await waitFor(/24 80[\s\S]*A42/);
    await sb.pty.resize(h.pid, { cols: 100, rows: 30 });
    await sb.pty.sendInput(h.pid, enc("stty size; echo B$((6*7))\n"));
    const after = await waitFor(/30 100[\s\S]*B42/);
    await sb.pty.sendInput(h.pid, enc("exit\n"));
    const r = await h.wait();
    return { before, after, exitCode: r.exitCode, tty: /24 80/.test(text) };
  },
  async write_bytes(step) {
    const data = bytes(step.size, step.seed ?? 1);
    await box(step).files.write(step.path, data.buffer.slice(
      data.byteOffset, data.byteOffset + data.length));
    return sha(data);
  },
  async read_sha(step) {
    const data = await box(step).files.read(step.path, { format: "bytes" });
    return { sha: sha(Buffer.from(data)), size: data.length };
  },
  async write(step) {
    return dates(await box(step).files.write(step.path, step.text,
      step.opts ?? {}));
  },
  async read(step) {
    return await box(step).files.read(step.path, step.opts ?? {});
  },
  async exists(step) {
    return await box(step).files.exists(step.path);
  },
  async list_dir(step) {
    return (await box(step).files.list(step.path)).map((e) => e.name);
  },
  async watch(step) {
    const sb = box(step);
    const events = [];
    await sb.files.makeDir(step.dir);
    const w = await sb.files.watchDir(step.dir, (e) => events.push(
      { name: e.name, type: e.type }), { timeoutMs: 60000 });
    await sb.files.write(`${step.dir}/${step.file}`, "x");
    for (let i = 0; i < 400 && !events.some((e) => e.name === step.file);
      i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await w.stop();
    return events;
  },
  async signed_urls(step) {
    const sb = box(step);
    const up = await sb.uploadUrl(step.path);
    const form = new FormData();
    form.append("file", new Blob([step.text]), step.path);
    const u = await fetch(up, { method: "POST", body: form });
    const down = await sb.downloadUrl(step.path);
    const d = await fetch(down);
    // Change the signature's first character to another one: always "A"
    // left one signature in 64 (those starting with "A") unchanged.
    const tampered = await fetch(down.replace(/signature=v1_(.)/,
      (_, c) => `signature=v1_${c === "A" ? "B" : "A"}`));
    return { upload: u.status, download: d.status, text: await d.text(),
             tampered: tampered.status,
             urls: [up, down].map((x) => new URL(x).pathname) };
  },
  async run_code(step) {
    const out = [];
    const ex = await box(step).runCode(step.code, { ...(step.opts ?? {}),
      onStdout: (m) => out.push(m.line) });
    return { text: ex.text ?? null, logs: ex.logs, error: ex.error ?? null,
             results: ex.results.map((r) => ({ text: r.text ?? null,
               png: !!r.png, isMainResult: r.isMainResult })),
             executionCount: ex.executionCount ?? null, streamed: out };
  },
  async contexts(step) {
    const sb = box(step);
    const ctx = await sb.createCodeContext({ cwd: "/tmp" });
    await sb.runCode("x = 6 * 7", { context: ctx });
    const inCtx = (await sb.runCode("x", { context: ctx })).text;
    const outside = (await sb.runCode("x")).error?.name ?? null;
    const listed = (await sb.listCodeContexts()).map((c) => c.id)
      .includes(ctx.id);
    await sb.restartCodeContext(ctx);
    const afterRestart = (await sb.runCode("x", { context: ctx }))
      .error?.name ?? null;
    await sb.removeCodeContext(ctx);
    const gone = (await sb.listCodeContexts()).map((c) => c.id)
      .includes(ctx.id);
    return { inCtx, outside, listed, afterRestart, gone };
  },
};

for (const step of JSON.parse(process.argv[2])) {
  try {
    out({ op: step.op, ok: (await ops[step.op](step)) ?? null });
  } catch (e) {
    out({ op: step.op, error: errorOf(e) });
  }
}
// Streams of background commands left open would hold the process.
process.exit(0);
