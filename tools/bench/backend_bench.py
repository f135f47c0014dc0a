#!/usr/bin/python3
"""Helper of the backend section of tools/bench/run: creates and removals
through sandboxd, one sandboxd per backend, taking turns.

  backend_bench.py cycles TYPE N NAME=URL...
      N cycles for each sandboxd, in blocks of BLOCK (5) taking turns, a
      second's pause between blocks (a Docker removal answered goes on in
      dockerd and containerd for a while; the next block is not to pay
      for it): a cycle creates a TYPE sandbox (POST /v1/sandboxes:
      answered once its agent is healthy) and removes it (DELETE:
      answered once it is gone); prints NAME_create_p50_ms,
      NAME_create_p90_ms, NAME_remove_p50_ms, NAME_remove_p90_ms for each

Only 127.0.0.1 is reached.
"""
import http.client
import json
import statistics
import sys
import time
from urllib.parse import urlparse

BLOCK = 5


class Client:
    def __init__(self, url):
        u = urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port,
                                               timeout=600)

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers={
            "Content-Type": "application/json"} if data else {})
        r = self.conn.getresponse()
        return r.status, r.read()


def percentile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def cycles(type_name, n, targets):
    clients = [(name, Client(url)) for name, url in targets]
    times = {name: ([], []) for name, _ in clients}
    blocks = [(name, c) for _ in range(0, n, BLOCK) for name, c in clients]
    for b, (name, c) in enumerate(blocks):
        if b > 0:
            time.sleep(1)
        for _ in range(min(BLOCK, n - len(times[name][0]))):
            t0 = time.monotonic()
            status, body = c.request("POST", "/v1/sandboxes",
                                     {"type": type_name})
            t1 = time.monotonic()
            if status != 201:
                sys.exit(f"{name}: create {type_name}: {status} {body[:300]!r}")
            sid = json.loads(body)["container_name"]
            status, body = c.request("DELETE", "/v1/sandboxes/" + sid)
            t2 = time.monotonic()
            if status != 200:
                sys.exit(f"{name}: remove {sid}: {status} {body[:300]!r}")
            times[name][0].append((t1 - t0) * 1e3)
            times[name][1].append((t2 - t1) * 1e3)
    out = []
    for name, (create, remove) in times.items():
        out += [f"{name}_create_p50_ms={statistics.median(create):.0f}",
                f"{name}_create_p90_ms={percentile(create, 90):.0f}",
                f"{name}_remove_p50_ms={statistics.median(remove):.0f}",
                f"{name}_remove_p90_ms={percentile(remove, 90):.0f}"]
    print(" ".join(out))


def main():
    if len(sys.argv) < 5 or sys.argv[1] != "cycles":
        sys.exit(__doc__)
    cycles(sys.argv[2], int(sys.argv[3]),
           [a.split("=", 1) for a in sys.argv[4:]])


if __name__ == "__main__":
    main()
