"""The egress section of tools/bench/run: what the egress policy costs,
in the egress tests' own network world (tests/integration/helpers/egress_world.py:
a router namespace of its own behind a macvlan Docker network, nothing
leaves the machine).

  policing  p50 of the time sandboxd takes to police a new sandbox (its
            namespace found, the rules in, the resolver listening), from
            its log, and of the whole create, over N creates
  bulk      MB/s of a download of SIZE bytes from the router's HTTP server,
            in a sandbox under the policy and in a plain container of the
            same image on the same network, both by `docker exec` (the
            same process, user and confinement: the rules are the only
            difference), alternated ROUNDS times; medians

usage: egress_bench.py SANDBOXD_BIN TAG N SIZE ROUNDS
prints key=value lines.
"""
import re
import statistics
import subprocess
import sys
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration", "helpers"))

import sandboxd_fixtures  # noqa: E402
from egress_world import PUBLIC, World  # noqa: E402
from sandboxd_fixtures import Sandboxd, write_types  # noqa: E402

DOWNLOAD = ("import time, urllib.request; t = time.monotonic(); "
            "n = len(urllib.request.urlopen('http://%s/bulk?n=%d').read()); "
            "print(n / (time.monotonic() - t) / 1e6)")


def main():
    binary, tag, n, size, rounds = sys.argv[1:6]
    n, size, rounds = int(n), int(size), int(rounds)
    sandboxd_fixtures.SANDBOXD_BIN = binary
    world = World()
    s = None
    try:
        d = os.path.dirname(world.dns_log)
        types = write_types(d, {"netbox": {"from": "base",
                                           "network": "bridge"}})
        env = dict(world.sandboxd_env(), SANDBOXD_LOG_LEVEL="debug",
                   SANDBOXD_ACCESS_LOG="false")
        s = Sandboxd(tag, env=env, args=["--types", types])
        creates = []
        names = []
        for _ in range(n):
            t = time.monotonic()
            r = s.post("/v1/sandboxes", {"type": "netbox", "pool": False})
            creates.append((time.monotonic() - t) * 1e3)
            assert r.status_code == 201, r.text
            names.append(r.json()["container_name"])
        policed = [float(x) for x in re.findall(r"policed in ([0-9.]+) ms",
                                                s.read_log())]
        print(f"police_p50_ms={statistics.median(policed):.1f}")
        print(f"create_p50_ms={statistics.median(creates):.0f}")
        for name in names[1:]:
            s.delete(f"/v1/sandboxes/{name}")
        code = DOWNLOAD % (PUBLIC, size)
        image = f"agentscope/runtime-sandbox-base:{tag}"
        plain = subprocess.run(
            ["docker", "run", "-d", "--rm", "--network", world.network,
             "--label", "io.agentscope.sandbox.bench=1", "--entrypoint",
             "sleep", image, "3600"], capture_output=True, text=True,
            check=True).stdout.strip()
        with_policy, without = [], []
        try:
            for _ in range(rounds):
                for box, out in ((names[0], with_policy), (plain, without)):
                    r = subprocess.run(
                        ["docker", "exec", box, "python3", "-c", code],
                        capture_output=True, text=True, check=True,
                        timeout=600)
                    out.append(float(r.stdout))
        finally:
            subprocess.run(["docker", "rm", "-f", plain],
                           capture_output=True)
        a, b = statistics.median(with_policy), statistics.median(without)
        print(f"bulk_with_mbs={a:.0f}")
        print(f"bulk_without_mbs={b:.0f}")
        print(f"bulk_ratio_pct={a / b * 100:.1f}")
    finally:
        if s is not None:
            s.stop()
            s.remove_leftovers()
        world.close()


if __name__ == "__main__":
    main()
