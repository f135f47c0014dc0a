#!/usr/bin/python3
"""Helper of the sandbox_mcp section of tools/bench/run (issue 16's
targets): sandbox-mcp against a running sandboxd whose pool keeps warm
minimal sandboxes.

  sandbox_mcp_bench.py first URL MCP_BIN N
      N new sandbox-mcp sessions, each timed from its first tools/call
      (run_shell_command "echo hi") to the answer, the pool refilled
      between them; prints first_p50_ms first_max_ms
  sandbox_mcp_bench.py overhead URL MCP_BIN N
      run_shell_command "echo hi" in one sandbox, N calls through
      sandbox-mcp (JSON-RPC lines over its pipes) and N straight to
      sandboxd's /call_tool (one keep-alive connection), one of each in
      turn, both from this process so the client's own cost weighs on both
      alike; prints mcp_p50_us direct_p50_us and overhead_us, the median
      of the pairs' differences (steadier under load than a difference
      of medians)
  sandbox_mcp_bench.py http_first URL N
  sandbox_mcp_bench.py http_overhead URL N
      the same through sandboxd's own /mcp (streamable HTTP, one
      keep-alive connection, a new MCP session each time for http_first)

Only 127.0.0.1 is reached.
"""
import http.client
import json
import statistics
import subprocess
import sys
import time
from urllib.parse import urlparse

sys.path.insert(0, sys.path[0])
from sandboxd_bench import post, wait_pool  # noqa: E402

CALL = {"name": "run_shell_command", "arguments": {"command": "echo hi"}}


def start(url, mcp_bin):
    return subprocess.Popen([mcp_bin, "--type=minimal", "--base_url=" + url],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def call(p, i):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method":
                               "tools/call", "params": CALL}) + "\n").encode())
    p.stdin.flush()
    answer = json.loads(p.stdout.readline())
    if answer.get("result", {}).get("isError") is not False:
        sys.exit(f"tools/call failed: {answer}")


def end(p):
    p.stdin.close()
    if p.wait(60) != 0:
        sys.exit(f"sandbox-mcp exited with {p.returncode}")


def first(url, mcp_bin, n):
    times = []
    for _ in range(n):
        wait_pool(url, "minimal", 1)
        p = start(url, mcp_bin)
        t = time.perf_counter()
        call(p, 1)
        times.append((time.perf_counter() - t) * 1000)
        end(p)
    print(f"first_p50_ms={statistics.median(times):.1f} "
          f"first_max_ms={max(times):.1f}")


def compare(url, via_call, prefix, n):
    """n calls through via_call and as many straight to /call_tool on the
    session's sandbox (its sandboxd session starts with prefix), one of
    each in turn so that drift in the machine's load weighs on both
    alike; the overhead is the median of the pairs' differences."""
    keys = post(url, "/list_session_keys", {})["data"]
    [name] = [post(url, "/get_session_mapping", {"session_ctx_id": k})
              ["data"][0] for k in keys if k.startswith(prefix)]
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = json.dumps({"identity": name, "tool_name": CALL["name"],
                       "arguments": CALL["arguments"]})
    t_via, t_direct = [], []
    for i in range(n):
        t = time.perf_counter()
        via_call(i + 1)
        t_via.append(time.perf_counter() - t)
        t = time.perf_counter()
        conn.request("POST", "/call_tool", body,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        t_direct.append(time.perf_counter() - t)
        if resp.status != 200:
            sys.exit(f"/call_tool: {resp.status} {data[:200]}")
    m, d = statistics.median(t_via) * 1e6, statistics.median(t_direct) * 1e6
    diff = statistics.median(a - b for a, b in zip(t_via, t_direct)) * 1e6
    print(f"mcp_p50_us={m:.0f} direct_p50_us={d:.0f} overhead_us={diff:.0f}")


def overhead(url, mcp_bin, n):
    p = start(url, mcp_bin)
    call(p, 0)
    compare(url, lambda i: call(p, i), "sandbox-mcp-", n)
    end(p)


class HttpSession:
    """An MCP session on sandboxd's /mcp over one keep-alive connection."""

    def __init__(self, url):
        u = urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port,
                                               timeout=60)
        self.sid = None
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18",
                                  "capabilities": {}, "clientInfo":
                                  {"name": "bench", "version": "1"}}})
        if "result" not in r:
            sys.exit(f"initialize failed: {r}")

    def post(self, msg):
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.sid:
            headers["Mcp-Session-Id"] = self.sid
        self.conn.request("POST", "/mcp?type=minimal", json.dumps(msg),
                          headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            sys.exit(f"/mcp: {resp.status} {data[:200]}")
        self.sid = self.sid or resp.getheader("Mcp-Session-Id")
        return json.loads(data)

    def call(self, i):
        answer = self.post({"jsonrpc": "2.0", "id": i,
                            "method": "tools/call", "params": CALL})
        if answer.get("result", {}).get("isError") is not False:
            sys.exit(f"tools/call failed: {answer}")

    def end(self):
        self.conn.request("DELETE", "/mcp", headers={"Mcp-Session-Id":
                                                     self.sid})
        resp = self.conn.getresponse()
        resp.read()
        if resp.status != 204:
            sys.exit(f"DELETE /mcp: {resp.status}")
        self.conn.close()


def http_first(url, n):
    times = []
    for _ in range(n):
        wait_pool(url, "minimal", 1)
        s = HttpSession(url)
        t = time.perf_counter()
        s.call(1)
        times.append((time.perf_counter() - t) * 1000)
        s.end()
    print(f"first_p50_ms={statistics.median(times):.1f} "
          f"first_max_ms={max(times):.1f}")


def http_overhead(url, n):
    s = HttpSession(url)
    s.call(0)
    compare(url, s.call, "mcp-", n)
    s.end()


if __name__ == "__main__":
    cmd, url = sys.argv[1:3]
    mcp_bin = sys.argv[3] if len(sys.argv) > 3 else None
    if cmd == "http_first":
        http_first(url, int(sys.argv[3]))
    elif cmd == "http_overhead":
        http_overhead(url, int(sys.argv[3]))
    elif cmd == "first":
        first(url, mcp_bin, int(sys.argv[4]))
    elif cmd == "overhead":
        overhead(url, mcp_bin, int(sys.argv[4]))
    else:
        sys.exit(__doc__)
