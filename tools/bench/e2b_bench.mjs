// Helper of the e2b section of tools/bench/run (issue 24's figures): E2B's
// npm SDKs against a running sandboxd, on 127.0.0.1 only.
//
//   node e2b_bench.mjs create URL KEY TEMPLATE N
//       N Sandbox.create(TEMPLATE), each once the type's pool has a warm
//       sandbox again, killed after, after one not counted (the SDK's
//       first call loads its code); and as many plain fetches of the same
//       route, one of each in turn: what sandboxd itself takes; and both
//       against the floor (below): prints create_p50_ms create_max_ms
//       fetch_p50_ms floor_p50_ms floor_fetch_p50_ms
//   node e2b_bench.mjs cold URL KEY TEMPLATE IMAGE TRUE_BIN N
//       (a sandboxd without a pool) N Sandbox.create beside N bare
//       `docker run --rm IMAGE` of TRUE_BIN, one of each in turn; prints
//       create_p50_ms true_p50_ms ratio
//   node e2b_bench.mjs run URL KEY TEMPLATE N STATE_DIR
//       one sandbox; N commands.run('true') and N run_shell_command
//       "true" through AgentScope's /call_tool on it, one of each in turn,
//       both with Node's fetch (undici); prints e2b_p50_us
//       agentscope_p50_us overhead_us (the median of the pairs'
//       differences, steadier under load than a difference of medians);
//       and where the time goes, each path in the same turns: the Start
//       RPC by a plain fetch through the router (routed_p50_us) and
//       straight to the agent's unix socket under STATE_DIR
//       (direct_p50_us), its command without bash's -l
//       (direct_nologin_p50_us), the agent's run_shell_command there
//       (shell_direct_p50_us); and both clients against the floor
//       (e2b_floor_p50_us agentscope_floor_p50_us)
//   node e2b_bench.mjs runcode URL KEY N STATE_DIR
//       one code interpreter sandbox; N runCode('1+1') after a warm-up;
//       prints runcode_p50_us runcode_p99_us, and /execute by a plain
//       fetch through the router and straight to the agent (routed_p50_us
//       direct_p50_us), and runCode and the plain fetch against the floor
//       (runcode_floor_p50_us fetch_floor_p50_us)
//   node e2b_bench.mjs floor
//       (started by the modes above) the floor: a server on 127.0.0.1
//       that answers each route with the answer recorded from sandboxd
//       (its status, Content-Type and bytes, read as JSON from stdin),
//       the whole body in one write; prints its port. What a client takes
//       against it is the client's own cost, which no server removes.
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { createRequire } from "node:module";

// The SDKs the tests use (tests/node_modules), as they are published.
const require = createRequire(new URL("../../tests/integration/",
  import.meta.url));
const { Sandbox } = require("e2b");
const { Sandbox: CiSandbox } = require("@e2b/code-interpreter");
const { Agent } = require("undici");

const [mode, url, key, ...args] = process.argv.slice(2);
process.env.E2B_API_URL = url + "/e2b";
process.env.E2B_SANDBOX_URL = url;
process.env.E2B_API_KEY = key;

const now = () => Number(process.hrtime.bigint()) / 1e3;	// us
const sorted = (v) => [...v].sort((a, b) => a - b);
const pct = (v, p) => sorted(v)[Math.min(v.length - 1,
  Math.floor(p * v.length))];
const median = (v) => pct(v, 0.5);

async function poolReady(type) {
  const r = await fetch(url + "/metrics",
    { headers: { Authorization: `Bearer ${key}` } });
  const line = (await r.text()).split("\n").find((l) =>
    l.startsWith(`sandboxd_pool_ready{type="${type}"}`));
  return line ? Number(line.split(" ").pop()) : 0;
}

async function waitPool(type) {
  for (let i = 0; i < 3000; i++) {
    if (await poolReady(type) >= 1) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`the ${type} pool stayed empty`);
}

const apiHeaders = { "X-API-Key": key, "Content-Type": "application/json" };
const createInit = (template) => ({ method: "POST", headers: apiHeaders,
  body: JSON.stringify({ templateID: template }) });

// A sandbox of template created by a plain fetch, its answer recorded for
// the floor, and the SDK's object of it.
async function createRecorded(template, Class) {
  const answer = await record(url + "/e2b/v2/sandboxes", createInit(template));
  const id = JSON.parse(Buffer.from(answer.body, "base64")).sandboxID;
  if (answer.status !== 201) throw new Error(`create: ${answer.status}`);
  return { answer, sb: await Class.connect(id) };
}

async function create(template, n) {
  const times = [], plain = [], floorSdk = [], floorPlain = [];
  await waitPool(template);
  const { answer, sb: first } = await createRecorded(template, Sandbox);
  await first.kill();
  const floor = await floorStart({ "POST /e2b/v2/sandboxes": answer });
  const at = { apiUrl: floor.url + "/e2b", sandboxUrl: floor.url };
  try {
    for (let i = 0; i <= n; i++) {
      await waitPool(template);
      let t = now();
      const sb = await Sandbox.create(template);
      if (i > 0) times.push(now() - t);
      await sb.kill();
      await waitPool(template);
      t = now();
      const r = await fetch(url + "/e2b/v2/sandboxes", createInit(template));
      const id = (await r.json()).sandboxID;
      if (i > 0) plain.push(now() - t);
      await fetch(url + "/e2b/sandboxes/" + id, { method: "DELETE",
        headers: apiHeaders });
      t = now();
      const f = await Sandbox.create(template, at);
      if (i > 0) floorSdk.push(now() - t);
      await f.kill();
      t = now();
      await (await fetch(floor.url + "/e2b/v2/sandboxes",
        createInit(template))).json();
      if (i > 0) floorPlain.push(now() - t);
    }
  } finally {
    floor.child.kill();
  }
  const ms = (v) => (median(v) / 1e3).toFixed(2);
  console.log(`create_p50_ms=${ms(times)} ` +
    `create_max_ms=${(Math.max(...times) / 1e3).toFixed(2)} ` +
    `fetch_p50_ms=${ms(plain)} floor_p50_ms=${ms(floorSdk)} ` +
    `floor_fetch_p50_ms=${ms(floorPlain)} n=${n}`);
}

async function cold(template, image, trueBin, n) {
  const ours = [], bare = [];
  for (let i = 0; i < n; i++) {
    let t = now();
    const sb = await Sandbox.create(template);
    ours.push(now() - t);
    await sb.kill();
    t = now();
    const p = spawnSync("docker", ["run", "--rm", "--network", "none",
      "--label", "io.agentscope.sandboxd.bench=1", "--entrypoint", trueBin,
      image]);
    if (p.status !== 0) throw new Error(`docker run: ${p.stderr}`);
    bare.push(now() - t);
  }
  const o = median(ours) / 1e3, b = median(bare) / 1e3;
  console.log(`create_p50_ms=${o.toFixed(0)} true_p50_ms=${b.toFixed(0)} ` +
    `ratio=${(o / b).toFixed(2)} n=${n}`);
}

// The agent of sandbox id, straight: its unix socket under stateDir and
// its token, as sandboxd knows them.
async function agentOf(id, stateDir) {
  const r = await fetch(url + "/get_info", { method: "POST",
    headers: { Authorization: `Bearer ${key}` },
    body: JSON.stringify({ identity: id }) });
  const m = (await r.json()).data;
  return { token: m.runtime_token, dispatcher: new Agent({ connect:
    { socketPath: `${stateDir}/run/${m.session_id}/agent.sock` } }) };
}

// The answer of one request, as the floor replays it.
async function record(target, init) {
  const r = await fetch(target, init);
  const body = Buffer.from(await r.arrayBuffer());
  return { status: r.status, type: r.headers.get("content-type"),
           sized: r.headers.has("content-length"),
           body: body.toString("base64") };
}

// The floor in a process of its own, answering "METHOD /path" from
// answers (any DELETE: 204); its URL and the process, to kill.
async function floorStart(answers) {
  const child = spawn(process.execPath, [new URL(import.meta.url).pathname,
    "floor"], { stdio: ["pipe", "pipe", "inherit"] });
  child.stdin.end(JSON.stringify(answers));
  const port = await new Promise((resolve, reject) => {
    child.stdout.once("data", (d) => resolve(Number(String(d).trim())));
    child.once("exit", (c) => reject(new Error(`the floor exited: ${c}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

async function floorServe() {
  let text = "";
  for await (const d of process.stdin) text += d;
  const answers = Object.fromEntries(Object.entries(JSON.parse(text)).map(
    ([k, a]) => [k, { ...a, body: Buffer.from(a.body, "base64") }]));
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const path = req.url.split("?")[0];
      const a = answers[`${req.method} ${path}`];
      if (req.method === "DELETE") {
        res.writeHead(204).end();
      } else if (a === undefined) {
        res.writeHead(404, { "Content-Type": "text/plain" })
          .end(`the floor has no answer for ${req.method} ${path}`);
      } else {
        // A stream without Content-Length: chunked, as sandboxd sends it.
        res.writeHead(a.status, { "Content-Type": a.type, ...(a.sized ?
          { "Content-Length": a.body.length } : {}) });
        res.end(a.body);
      }
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(0, "127.0.0.1", () =>
    console.log(String(server.address().port)));
}

// envd's Start of /bin/bash args: the request.
function startInit(headers, dispatcher, args) {
  const m = Buffer.from(JSON.stringify({ process: { cmd: "/bin/bash", args },
    stdin: false }));
  const body = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), m]);
  body.writeUInt32BE(m.length, 1);
  return { method: "POST", body, dispatcher,
    headers: { "Content-Type": "application/connect+json",
               "Connect-Protocol-Version": "1", ...headers } };
}

// The same, read to its end.
async function start(target, headers, dispatcher, args) {
  const r = await fetch(target, startInit(headers, dispatcher, args));
  const text = Buffer.from(await r.arrayBuffer()).toString();
  if (r.status !== 200 || !text.includes('"end"')) {
    throw new Error(`Start: ${r.status} ${text}`);
  }
}

// Each path once a turn, N turns after 20 not counted: the times.
async function turns(paths, n) {
  const times = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
  for (let i = 0; i < n + 20; i++) {
    for (const [k, f] of Object.entries(paths)) {
      const t = now();
      await f();
      if (i >= 20) times[k].push(now() - t);
    }
  }
  return times;
}

const p50s = (times) => Object.entries(times).map(([k, v]) =>
  `${k}_p50_us=${median(v).toFixed(0)}`).join(" ");

async function run(template, n, stateDir) {
  const { answer, sb } = await createRecorded(template, Sandbox);
  const envdToken = sb.envdAccessToken;
  const direct = await agentOf(sb.sandboxId, stateDir);
  const routed = { "E2b-Sandbox-Id": sb.sandboxId,
    "E2b-Sandbox-Port": "49983", "X-Access-Token": envdToken };
  const toolInit = { method: "POST", body: JSON.stringify({
    identity: sb.sandboxId, tool_name: "run_shell_command",
    arguments: { command: "true" } }),
    headers: { Authorization: `Bearer ${key}`,
               "Content-Type": "application/json" } };
  const floor = await floorStart({ "POST /e2b/v2/sandboxes": answer,
    "POST /process.Process/Start": await record(url +
      "/process.Process/Start", startInit(routed, undefined,
      ["-l", "-c", "true"])),
    "POST /call_tool": await record(url + "/call_tool", toolInit) });
  const sbFloor = await Sandbox.create(template, { apiUrl: floor.url +
    "/e2b", sandboxUrl: floor.url });
  const callTool = async (base) => {
    const r = await fetch(base + "/call_tool", toolInit);
    const j = await r.json();
    if (r.status !== 200 || j.data.isError) {
      throw new Error(`call_tool: ${JSON.stringify(j)}`);
    }
  };
  const commandsRun = async (box) => {
    const r = await box.commands.run("true");
    if (r.exitCode !== 0) throw new Error(`commands.run: ${r.exitCode}`);
  };
  const paths = {
    e2b: () => commandsRun(sb),
    agentscope: () => callTool(url),
    e2b_floor: () => commandsRun(sbFloor),
    agentscope_floor: () => callTool(floor.url),
    routed: () => start(url + "/process.Process/Start", routed, undefined,
      ["-l", "-c", "true"]),
    direct: () => start("http://agent/envd/process.Process/Start",
      { Authorization: `Bearer ${direct.token}` }, direct.dispatcher,
      ["-l", "-c", "true"]),
    direct_nologin: () => start("http://agent/envd/process.Process/Start",
      { Authorization: `Bearer ${direct.token}` }, direct.dispatcher,
      ["-c", "true"]),
    shell_direct: async () => {
      const r = await fetch("http://agent/tools/run_shell_command", {
        method: "POST", body: '{"command": "true"}',
        dispatcher: direct.dispatcher,
        headers: { Authorization: `Bearer ${direct.token}`,
                   "Content-Type": "application/json" } });
      await r.json();
    },
  };
  let times;
  try {
    times = await turns(paths, n);
  } finally {
    floor.child.kill();
  }
  await sb.kill();
  const d = times.e2b.map((v, i) => v - times.agentscope[i]);
  console.log(`${p50s(times)} overhead_us=${median(d).toFixed(0)} n=${n}`);
}

async function runcode(n, stateDir) {
  const { answer, sb } = await createRecorded("code-interpreter-v1",
    CiSandbox);
  const direct = await agentOf(sb.sandboxId, stateDir);
  const init = (headers, dispatcher) => ({ method: "POST", dispatcher,
    body: JSON.stringify({ code: "1+1" }),
    headers: { "Content-Type": "application/json", ...headers } });
  const routed = init({ "E2b-Sandbox-Id": sb.sandboxId,
    "E2b-Sandbox-Port": "49999", "X-Access-Token": sb.envdAccessToken });
  const floor = await floorStart({ "POST /e2b/v2/sandboxes": answer,
    "POST /execute": await record(url + "/execute", routed) });
  const sbFloor = await CiSandbox.create({ apiUrl: floor.url + "/e2b",
    sandboxUrl: floor.url });
  const execute = async (target, how) => {
    const text = await (await fetch(target, how)).text();
    if (!text.includes("end_of_execution")) throw new Error(text);
  };
  const runCode = async (box) => {
    const e = await box.runCode("1+1");
    if (e.text !== "2") throw new Error(`runCode: ${JSON.stringify(e)}`);
  };
  const paths = {
    runcode: () => runCode(sb),
    routed: () => execute(url + "/execute", routed),
    direct: () => execute("http://agent/ci/execute",
      init({ Authorization: `Bearer ${direct.token}` }, direct.dispatcher)),
    runcode_floor: () => runCode(sbFloor),
    fetch_floor: () => execute(floor.url + "/execute", routed),
  };
  let times;
  try {
    times = await turns(paths, n);
  } finally {
    floor.child.kill();
  }
  await sb.kill();
  console.log(`${p50s(times)} ` +
    `runcode_p99_us=${pct(times.runcode, 0.99).toFixed(0)} n=${n}`);
}

try {
  if (mode === "create") await create(args[0], Number(args[1]));
  else if (mode === "cold") {
    await cold(args[0], args[1], args[2], Number(args[3]));
  } else if (mode === "run") await run(args[0], Number(args[1]), args[2]);
  else if (mode === "runcode") await runcode(Number(args[0]), args[1]);
  else if (mode === "floor") await floorServe();
  else throw new Error(`unknown mode ${mode}`);
} catch (e) {
  console.error(`${e?.constructor?.name}: ${e?.message ?? e}`);
  process.exit(1);
}
