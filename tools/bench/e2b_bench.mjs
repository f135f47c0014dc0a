// Helper of the e2b section of tools/bench/run (issue 24's figures): E2B's
// npm SDKs against a running sandboxd, on 127.0.0.1 only.
//
//   node e2b_bench.mjs create URL KEY TEMPLATE N
//       N Sandbox.create(TEMPLATE), each once the type's pool has a warm
//       sandbox again, killed after, after one not counted (the SDK's
//       first call loads its code); and as many plain fetches of the same
//       route, one of each in turn: what sandboxd itself takes; prints
//       create_p50_ms create_max_ms fetch_p50_ms
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
//       (shell_direct_p50_us)
//   node e2b_bench.mjs runcode URL KEY N STATE_DIR
//       one code interpreter sandbox; N runCode('1+1') after a warm-up;
//       prints runcode_p50_us runcode_p99_us, and /execute by a plain
//       fetch through the router and straight to the agent (routed_p50_us
//       direct_p50_us)
import { spawnSync } from "node:child_process";
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

async function create(template, n) {
  const times = [], plain = [];
  const headers = { "X-API-Key": key, "Content-Type": "application/json" };
  for (let i = 0; i <= n; i++) {
    await waitPool(template);
    let t = now();
    const sb = await Sandbox.create(template);
    if (i > 0) times.push(now() - t);
    await sb.kill();
    await waitPool(template);
    t = now();
    const r = await fetch(url + "/e2b/v2/sandboxes", { method: "POST",
      headers, body: JSON.stringify({ templateID: template }) });
    const id = (await r.json()).sandboxID;
    if (i > 0) plain.push(now() - t);
    await fetch(url + "/e2b/sandboxes/" + id, { method: "DELETE", headers });
  }
  console.log(`create_p50_ms=${(median(times) / 1e3).toFixed(2)} ` +
    `create_max_ms=${(Math.max(...times) / 1e3).toFixed(2)} ` +
    `fetch_p50_ms=${(median(plain) / 1e3).toFixed(2)} n=${n}`);
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

// envd's Start of /bin/bash args, read to its end.
async function start(target, headers, dispatcher, args) {
  const m = Buffer.from(JSON.stringify({ process: { cmd: "/bin/bash", args },
    stdin: false }));
  const body = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), m]);
  body.writeUInt32BE(m.length, 1);
  const r = await fetch(target, { method: "POST", body, dispatcher,
    headers: { "Content-Type": "application/connect+json",
               "Connect-Protocol-Version": "1", ...headers } });
  const text = Buffer.from(await r.arrayBuffer()).toString();
  if (r.status !== 200 || !text.includes('"end"')) {
    throw new Error(`Start: ${r.status} ${text}`);
  }
}

async function run(template, n, stateDir) {
  const sb = await Sandbox.create(template);
  const envdToken = sb.envdAccessToken;
  const direct = await agentOf(sb.sandboxId, stateDir);
  const body = JSON.stringify({ identity: sb.sandboxId,
    tool_name: "run_shell_command", arguments: { command: "true" } });
  const paths = {
    e2b: async () => {
      const r = await sb.commands.run("true");
      if (r.exitCode !== 0) throw new Error(`commands.run: ${r.exitCode}`);
    },
    agentscope: async () => {
      const r = await fetch(url + "/call_tool", { method: "POST", body,
        headers: { Authorization: `Bearer ${key}`,
                   "Content-Type": "application/json" } });
      const j = await r.json();
      if (r.status !== 200 || j.data.isError) {
        throw new Error(`call_tool: ${JSON.stringify(j)}`);
      }
    },
    routed: () => start(url + "/process.Process/Start",
      { "E2b-Sandbox-Id": sb.sandboxId, "E2b-Sandbox-Port": "49983",
        "X-Access-Token": envdToken }, undefined, ["-l", "-c", "true"]),
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
  const times = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
  const d = [];
  for (let i = 0; i < n + 20; i++) {
    for (const [k, f] of Object.entries(paths)) {
      const t = now();
      await f();
      if (i >= 20) times[k].push(now() - t);
    }
    if (i >= 20) d.push(times.e2b.at(-1) - times.agentscope.at(-1));
  }
  await sb.kill();
  console.log(Object.entries(times).map(([k, v]) =>
    `${k}_p50_us=${median(v).toFixed(0)}`).join(" ") +
    ` overhead_us=${median(d).toFixed(0)} n=${n}`);
}

async function runcode(n, stateDir) {
  const sb = await CiSandbox.create();
  const direct = await agentOf(sb.sandboxId, stateDir);
  const body = JSON.stringify({ code: "1+1" });
  const execute = async (target, headers, dispatcher) => {
    const r = await fetch(target, { method: "POST", body, dispatcher,
      headers: { "Content-Type": "application/json", ...headers } });
    const text = await r.text();
    if (!text.includes("end_of_execution")) throw new Error(text);
  };
  const paths = {
    runcode: async () => {
      const e = await sb.runCode("1+1");
      if (e.text !== "2") throw new Error(`runCode: ${JSON.stringify(e)}`);
    },
    routed: () => execute(url + "/execute", { "E2b-Sandbox-Id":
      sb.sandboxId, "E2b-Sandbox-Port": "49999",
      "X-Access-Token": sb.envdAccessToken }),
    direct: () => execute("http://agent/ci/execute",
      { Authorization: `Bearer ${direct.token}` }, direct.dispatcher),
  };
  const times = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
  for (let i = 0; i < n + 20; i++) {
    for (const [k, f] of Object.entries(paths)) {
      const t = now();
      await f();
      if (i >= 20) times[k].push(now() - t);
    }
  }
  await sb.kill();
  console.log(Object.entries(times).map(([k, v]) =>
    `${k}_p50_us=${median(v).toFixed(0)}`).join(" ") +
    ` runcode_p99_us=${pct(times.runcode, 0.99).toFixed(0)} n=${n}`);
}

try {
  if (mode === "create") await create(args[0], Number(args[1]));
  else if (mode === "cold") {
    await cold(args[0], args[1], args[2], Number(args[3]));
  } else if (mode === "run") await run(args[0], Number(args[1]), args[2]);
  else if (mode === "runcode") await runcode(Number(args[0]), args[1]);
  else throw new Error(`unknown mode ${mode}`);
} catch (e) {
  console.error(`${e?.constructor?.name}: ${e?.message ?? e}`);
  process.exit(1);
}
