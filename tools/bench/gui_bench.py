#!/usr/bin/python3
"""Helpers of the gui section of tools/bench/run: the figures that are not
one request repeated (httplat measures those).

  gui_bench.py pair URL TOKEN N
      N times mouse_move then get_cursor_position through the agent's
      POST /mcp/call_tool (one keep-alive connection), alternating two
      places and checking the answer; prints p50_us and p99_us of a pair
  gui_bench.py idle-rss URL SECONDS
      create a gui sandbox through sandboxd, leave it idle SECONDS, then
      add up the memory of every process in its container: RSS and PSS
      (shared pages split among their users); prints rss_mib, pss_mib,
      processes; the sandbox is released after
  gui_bench.py first-look URL N
      N cold creates of a gui sandbox through sandboxd, each followed at
      once by screenshots through /call_tool until one shows a drawn
      desktop (less than half of it black: jwm's background and tray);
      prints create_p50_ms (to the create's answer), usable_p50_ms (to
      that screenshot) and blank_first_looks (creates whose first
      screenshot was not drawn yet); each sandbox is removed before the
      next create

Only 127.0.0.1 and containers made here are reached.
"""
import base64
import http.client
import io
import json
import statistics
import subprocess
import sys
import time
import urllib.request


def call(conn, headers, arguments):
    conn.request("POST", "/mcp/call_tool", json.dumps(
        {"tool_name": "computer", "arguments": arguments}), headers)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"{arguments}: HTTP {r.status} {body[:200]!r}")
    res = json.loads(body)
    if res.get("isError"):
        sys.exit(f"{arguments}: {res}")
    return res


def pair(url, token, n):
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Authorization": f"Bearer {token}",
               "Content-Type": "application/json"}
    times = []
    for i in range(n + n // 10):
        x, y = (100, 200) if i % 2 else (300, 400)
        t0 = time.perf_counter()
        call(conn, headers, {"action": "mouse_move", "coordinate": [x, y]})
        res = call(conn, headers, {"action": "get_cursor_position"})
        t1 = time.perf_counter()
        if res["structuredContent"] != {"x": x, "y": y}:
            sys.exit(f"the cursor is at {res['structuredContent']}, not "
                     f"{x}, {y}")
        if i >= n // 10:	# the first tenth warms up
            times.append((t1 - t0) * 1e6)
    times.sort()
    print(f"p50_us={statistics.median(times):.0f} "
          f"p99_us={times[int(len(times) * 0.99) - 1]:.0f} n={len(times)}")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["data"]


def memory_kib(pid):
    rss = pss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def idle_rss(url, seconds):
    name = post(url, "/create", {"sandbox_type": "gui"})
    if name is None:
        sys.exit("sandboxd could not create a gui sandbox")
    try:
        time.sleep(seconds)
        out = subprocess.run(["docker", "top", name, "-eo", "pid"],
                             capture_output=True, text=True, check=True)
        pids = [int(p) for p in out.stdout.split()[1:]]
        rss = pss = 0
        for pid in pids:
            r, p = memory_kib(pid)
            rss += r
            pss += p
        print(f"rss_mib={rss / 1024:.1f} pss_mib={pss / 1024:.1f} "
              f"processes={len(pids)}")
    finally:
        post(url, "/release", {"identity": name})


def drawn(url, name):
    """A screenshot through sandboxd shows a drawn desktop."""
    from PIL import Image

    res = post(url, "/call_tool", {"identity": name, "tool_name": "computer",
                                   "arguments": {"action": "get_screenshot"}})
    png = [c for c in res["content"] if c["type"] == "image"][0]["data"]
    img = Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")
    black = sum(n for n, rgb in img.getcolors(1 << 22) if rgb == (0, 0, 0))
    return black < img.width * img.height / 2


def first_look(url, n):
    creates, usable, blank = [], [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        name = post(url, "/create", {"sandbox_type": "gui"})
        if name is None:
            sys.exit("sandboxd could not create a gui sandbox")
        t1 = time.perf_counter()
        try:
            looks = 1
            while not drawn(url, name):
                looks += 1
                if time.perf_counter() - t1 > 60:
                    sys.exit(f"{name}: nothing drawn 60 s after its create")
            t2 = time.perf_counter()
        finally:
            post(url, "/release", {"identity": name})
        # Its removal done, so that the next create does not wait for it.
        while subprocess.run(["docker", "inspect", name],
                             capture_output=True).returncode == 0:
            time.sleep(0.05)
        blank += looks > 1
        creates.append((t1 - t0) * 1e3)
        usable.append((t2 - t0) * 1e3)
    print(f"create_p50_ms={statistics.median(creates):.0f} "
          f"usable_p50_ms={statistics.median(usable):.0f} "
          f"blank_first_looks={blank} n={n}")


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "pair":
        pair(argv[2], argv[3], int(argv[4]))
    elif cmd == "idle-rss":
        idle_rss(argv[2], float(argv[3]))
    elif cmd == "first-look":
        first_look(argv[2], int(argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
