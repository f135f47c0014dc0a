#!/usr/bin/python3
"""The s3 section of tools/bench/run: workspaces kept in object storage
(FILE_SYSTEM=oss) through the real sandboxd, against Ceph's RADOS gateway
on a throwaway one-node cluster on 127.0.0.1 (tests/integration/helpers/ceph_s3.py,
as the tests start it), the minimal image of this tree's agent.

  s3_bench.py SANDBOXD IMAGE_TAG FILES MIB DIR

A sandbox's workspace gets FILES files of MIB MiB in all (random bytes, in
ten directories); then its release (the upload), a create with its
storage_path (the download), and the release of that unchanged workspace.
Times are sandboxd's own (its log line per transfer), besides the release
and the create as a client sees them; the unchanged upload is also counted
request by request through a relay in front of the store. Prints k=v:
upload_s upload_mibs release_s download_s download_mibs create_s
unchanged_s unchanged_requests unchanged_puts rss_growth_kib, and the CPU
seconds sandboxd and the store (monitor, OSD, radosgw) spent during the
upload's release.

Only 127.0.0.1 and containers made here are reached; every process
started here is stopped by its pid, every container removed.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "helpers"))

from ceph_s3 import CephS3  # noqa: E402
from s3_relay import S3Relay  # noqa: E402


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sandboxd:
    def __init__(self, binary, tag, env, workdir):
        self.dir = workdir
        os.makedirs(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(workdir, "log")
        e = {"PATH": os.environ["PATH"], "RUNTIME_SANDBOX_IMAGE_TAG": tag,
             "DEFAULT_SANDBOX_TYPE": "minimal", "POOL_SIZE": "0",
             "SANDBOXD_STATE_DIR": os.path.join(workdir, "st"),
             "CONTAINER_PREFIX_KEY": "sbxbench-s3-"}
        e.update(env)
        self.proc = subprocess.Popen([binary, "--port", str(self.port)],
                                     env=e, cwd=workdir,
                                     stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT)
        for _ in range(500):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise RuntimeError("sandboxd did not start: " + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def rpc(self, method, **kw):
        req = urllib.request.Request(
            self.url + "/" + method, data=json.dumps(kw).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1800) as r:
            answer = json.load(r)
        if answer.get("data") in (None, False):
            raise RuntimeError(f"{method}: {answer}")
        return answer["data"]

    def timed(self, method, **kw):
        t = time.monotonic()
        data = self.rpc(method, **kw)
        return data, time.monotonic() - t

    def transfer_seconds(self, name, what):
        m = re.search(rf"sandbox {re.escape(name)}: workspace {what} "
                      r"\S+ of bucket \S+ in ([0-9.]+) s", self.log())
        if m is None:
            raise RuntimeError(f"no {what} line for {name}: "
                               + self.log()[-2000:])
        return float(m.group(1))

    def hwm_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_seconds(pids):
    """User and system CPU of pids so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def fill(s, name, files, mib):
    size = mib * (1 << 20) // files
    script = (f"cd /workspace && i=0; while [ $i -lt {files} ]; do "
              f"d=d$((i % 10)); mkdir -p $d; "
              f"head -c {size} /dev/urandom > $d/f$i; i=$((i + 1)); done")
    out = s.rpc("call_tool", identity=name, tool_name="run_shell_command",
                arguments={"command": script, "timeout": 1800})
    codes = [c["text"] for c in out["content"]
             if c.get("description") == "returncode"]
    if codes != ["0"]:
        raise RuntimeError(f"filling the workspace: {out}")
    return size * files


def main():
    binary, tag, files, mib, workdir = sys.argv[1:6]
    files, mib = int(files), int(mib)
    ceph = relay = direct = counted = None
    os.makedirs(workdir, exist_ok=True)
    try:
        ceph = CephS3(base=workdir)
        ceph.client("bench").make_bucket()
        relay = S3Relay(ceph.port)
        direct = Sandboxd(binary, tag, ceph.env("bench"),
                          os.path.join(workdir, "direct"))
        env = ceph.env("bench")
        env["OSS_ENDPOINT"] = relay.endpoint
        counted = Sandboxd(binary, tag, env, os.path.join(workdir, "counted"))

        a = direct.rpc("create", sandbox_type="minimal")
        total = fill(direct, a, files, mib)
        sp = direct.rpc("get_info", identity=a)["storage_path"]
        hwm = direct.hwm_kib()
        store = [p.pid for p in ceph.procs]
        cpu0 = cpu_seconds([direct.proc.pid]), cpu_seconds(store)
        _, release_s = direct.timed("release", identity=a)
        cpu1 = cpu_seconds([direct.proc.pid]), cpu_seconds(store)
        up = direct.transfer_seconds(a, "uploaded to")
        b, create_s = direct.timed("create", sandbox_type="minimal",
                                   storage_path=sp)
        down = direct.transfer_seconds(b, "downloaded from")
        growth = direct.hwm_kib() - hwm
        direct.rpc("release", identity=b)
        unchanged = direct.transfer_seconds(b, "uploaded to")

        c = counted.rpc("create", sandbox_type="minimal", storage_path=sp)
        relay.reset()
        counted.rpc("release", identity=c)
        mibs = total / (1 << 20)
        print(f"upload_s={up:.2f} upload_mibs={mibs / up:.1f} "
              f"release_s={release_s:.2f} download_s={down:.2f} "
              f"download_mibs={mibs / down:.1f} create_s={create_s:.2f} "
              f"unchanged_s={unchanged:.2f} "
              f"unchanged_requests={relay.count()} "
              f"unchanged_puts={relay.count('PUT')} "
              f"rss_growth_kib={growth} bytes={total} "
              f"upload_cpu_sandboxd_s={cpu1[0] - cpu0[0]:.2f} "
              f"upload_cpu_store_s={cpu1[1] - cpu0[1]:.2f}")
    finally:
        for s in (counted, direct):
            if s is not None:
                s.stop()
        if relay is not None:
            relay.close()
        if ceph is not None:
            ceph.stop()
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "name=sbxbench-s3-"],
            capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
