"""The crun backend's confinement against a hostile sandbox, and what it
leaves behind when things go wrong.

A sandbox's first process here is crun_probe.c (a type's entrypoint, from
a read-only mount): root of the container, with its capabilities, seccomp
profile and no-new-privileges, but not the agent's own filter for
commands, so what it cannot do is the container's doing. It tries to
mount, write /proc/sysrq-trigger, /proc/sys and the cgroup hierarchy
(release_agent included), make and open device nodes, use keyrings, make
user and mount namespaces, join another, reboot, and, once the agent is
PID 1, trace it and read its environment (its token) and memory; then it
executes the agent. Through the agent: a fork bomb held by the pids
limit, a memory hog killed by its own limit (sandboxd and the agent go
on). A first program that connects the moment it has a route is refused
by the egress policy already (in egress_world's closed world). Failures:
a crun that crashes half way through a run and a full disk give a clear
create error and leave no mount, cgroup, network namespace, directory,
process or crun state behind; a name taken in the trash leaves no bundle.
The bridge's forwarding rules come after DOCKER-USER (read, nothing
sent). Shutdown removes 200 live sandboxes. Every sandboxd here runs the
crun backend, whatever SANDBOXD_TEST_BACKEND says.
"""
import glob
import os
import re
import shutil
import signal
import subprocess

import pytest

from conftest import ROOT
from egress_world import PRIVATE, World
from sandboxd_fixtures import (minimal_tag, scratch, start_sandboxd,  # noqa: F401
                               wait_until, write_types)

AGENT = "/usr/local/bin/sandbox-agent"
# What a sandbox must not be able to do: each must fail (an errno).
DENIED = ["mount_tmpfs", "mount_cgroup", "sysrq_trigger", "proc_sys",
          "cgroup_mkdir", "cgroup_procs", "release_agent", "mknod_block",
          "mknod_mem", "open_mem", "keyctl", "add_key", "io_uring_setup",
          "unshare_user", "unshare_mount", "clone_newuser", "setns", "reboot",
          "ptrace_pid1", "environ_pid1", "mem_pid1"]

pytestmark = pytest.mark.skipif(shutil.which("crun") is None or
                                os.geteuid() != 0,
                                reason="the crun backend needs crun and root")


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    """crun_probe, static, in a directory every sandbox mounts read-only."""
    d = tmp_path_factory.mktemp("probe")
    subprocess.run(["cc", "-static", "-O1", "-o", str(d / "crun_probe"),
                    os.path.join(ROOT, "tests", "integration", "helpers",
                                 "crun_probe.c")], check=True)
    os.chmod(d, 0o755)
    return str(d)


def crun_sandboxd(start, env=None, **kw):
    e = {"CONTAINER_DEPLOYMENT": "crun"}
    e.update(env or {})
    return start(env=e, **kw)


def probed(s, name, timeout=30):
    """{attempt: errno} the probe wrote in the sandbox's workspace."""
    path = os.path.join(s.rpc("get_info", identity=name)["mount_dir"],
                        "probe.out")

    def read():
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return text if "done 0" in text else None

    text = wait_until(read, timeout, what="the probe's report", logs=[s])
    return {k: int(v) for k, v in (line.split() for line in
                                   text.splitlines())}


def probe_types(d, probe_dir):
    entry = ["/probe/crun_probe", AGENT]
    return write_types(d, {
        "probed": {"from": "minimal", "entrypoint": entry},
        # With CAP_MKNOD a node can be made, but the device cgroup still
        # lets no one open it.
        "mknod": {"from": "minimal", "entrypoint": entry,
                  "cap_add": ["MKNOD"]},
        "small": {"from": "minimal", "memory": "64M", "pids": 64},
    })


@pytest.fixture
def probing(start_sandboxd, scratch, probe_dir):
    types = probe_types(scratch("sbxd-types-"), probe_dir)
    return crun_sandboxd(start_sandboxd, args=["--types", types],
                         env={"READONLY_MOUNTS": f"{probe_dir}:/probe"})


def test_the_container_refuses_what_a_hostile_root_tries(probing):
    s = probing
    name = s.create("probed")
    got = probed(s, name)
    allowed = {k: v for k, v in got.items() if k in DENIED and v == 0}
    assert not allowed, got
    assert set(DENIED) <= set(got), got
    # The agent it executed serves on, with the token the probe could not
    # read.
    assert s.shell(name, "echo alive")["stdout"] == "alive\n"


@pytest.fixture
def crun_world():
    """egress_world's network world for a crun sandboxd: a router namespace
    with no way out, even when a policy is missing. Requested before
    start_sandboxd, it goes after the sandboxd does."""
    world = World(backend="crun")
    yield world
    world.close()


def test_the_first_program_of_a_sandbox_runs_policed(crun_world,
                                                     start_sandboxd,
                                                     scratch, probe_dir):
    """The network comes up, the egress policy goes in, and only then does
    the sandbox's first program run: one that connects the moment it has a
    route is refused as any later one is (a create, and a start after a
    stop, each a new namespace)."""
    types = write_types(scratch(), {"early": {
        "from": "minimal", "network": "bridge",
        "entrypoint": ["/probe/crun_probe", "--connect", PRIVATE, "80",
                       AGENT]}})
    s = crun_sandboxd(start_sandboxd, args=["--types", types], env=dict(
        crun_world.sandboxd_env(), READONLY_MOUNTS=f"{probe_dir}:/probe"))

    def connected(name):
        path = os.path.join(s.rpc("get_info", identity=name)["mount_dir"],
                            "connect.out")
        with open(path) as f:
            text = f.read()
        os.unlink(path)
        return text

    names = [s.create("early") for _ in range(3)]
    for name in names:
        # ECONNREFUSED: the policy's reset.
        assert connected(name) == "connect 111\n", name
    assert s.rpc("stop", identity=names[0]) is True
    assert s.rpc("start", identity=names[0]) is True
    assert connected(names[0]) == "connect 111\n"


def test_a_made_device_node_cannot_be_opened(probing):
    s = probing
    got = probed(s, s.create("mknod"))
    assert got["mknod_mem"] == 0, got
    assert got["open_mem"] != 0, got


def cgroup_file(name, controller, file):
    """A sandbox's cgroup file on the host (v1, or v2's one hierarchy)."""
    for path in (f"/sys/fs/cgroup/{controller}/sandboxd/{name}/{file}",
                 f"/sys/fs/cgroup/sandboxd/{name}/{file}"):
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
    raise FileNotFoundError(f"{controller}/{file} of {name}")


def test_a_fork_bomb_is_held_by_the_pids_limit(probing):
    s = probing
    name = s.create("small")
    # The shell gives up at its first fork refused (status 2).
    s.shell(name, "i=0; while [ $i -lt 500 ]; do sleep 60 & "
                  "i=$((i + 1)); done 2>/dev/null")
    current = int(cgroup_file(name, "pids", "pids.current"))
    assert 0 < current <= 64
    # The agent still answers, and so does another sandbox.
    assert s.rpc("check_health", identity=name) is True
    other = s.create()
    assert s.shell(other, "echo fine")["stdout"] == "fine\n"


def test_a_memory_hog_is_killed_by_its_own_limit(probing):
    s = probing
    name = s.create("small")
    pid = s.proc.pid
    out = s.shell(name, "/probe/crun_probe --hog 256; echo status=$?")
    # Killed by the OOM killer of its own cgroup (SIGKILL: 128 + 9).
    assert "status=137" in out["stdout"], out
    assert s.proc.poll() is None and s.proc.pid == pid
    assert s.rpc("check_health", identity=name) is True
    assert s.shell(name, "echo after")["stdout"] == "after\n"


def nothing_left(s, name):
    """No directory, crun state, cgroup, process or mount of sandbox name
    anywhere on the host."""
    bundle = os.path.join(s.crun_bundles, name)
    left = []
    if os.path.exists(bundle):
        left.append(bundle)
    if os.path.exists(os.path.join(s.crun_root, name)):
        left.append("crun state")
    left += glob.glob(f"/sys/fs/cgroup/*/sandboxd/{name}")
    left += glob.glob(f"/sys/fs/cgroup/sandboxd/{name}")
    trash = os.path.join(s.state_dir, "crun", "trash")
    if os.path.isdir(trash):
        left += [t for t in os.listdir(trash) if t.startswith(name)]
    for mi in glob.glob("/proc/[0-9]*/mountinfo"):
        try:
            with open(mi) as f:
                if name in f.read():
                    left.append(mi)
        except OSError:
            pass
    return left


def test_a_crun_that_crashes_half_way_leaves_nothing(start_sandboxd, scratch):
    # This crun makes the container (crun create: its cgroup, its state,
    # its first process waiting) and dies of SIGSEGV before starting it.
    d = scratch("sbxd-crun-")
    crashing = os.path.join(d, "crun")
    with open(crashing, "w") as f:
        f.write("""#!/bin/sh
case " $* " in *" run "*) ;; *) exec crun "$@" ;; esac
for a do
    shift
    case $a in run) set -- "$@" create ;; --detach) ;; *) set -- "$@" "$a" ;; esac
done
crun "$@"
kill -SEGV $$
""")
    os.chmod(crashing, 0o755)
    s = crun_sandboxd(start_sandboxd, env={"SANDBOXD_CRUN": crashing})
    r = s.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 500, r.text
    assert "crun run failed (signal 11)" in r.json()["detail"], r.text
    [name] = re.findall(r"sandbox (\S+) \(minimal\) not created",
                        s.read_log())
    wait_until(lambda: not nothing_left(s, name), 30,
               what="nothing left of " + name, logs=[s])
    assert s.containers() == {}


@pytest.fixture
def small_disk(scratch):
    """A 2 MiB file system (tmpfs) of the test's own."""
    d = scratch("sbxd-disk-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", d],
                   check=True)
    yield d
    subprocess.run(["umount", "-l", d], check=False)


def test_a_full_disk_gives_a_clear_error_and_leaves_nothing(start_sandboxd,
                                                           small_disk):
    s = crun_sandboxd(start_sandboxd,
                      state_dir=os.path.join(small_disk, "st"))
    filler = os.path.join(small_disk, "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"],
                   capture_output=True)
    r = s.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 500, r.text
    assert "No space left on device" in r.json()["detail"], r.text
    os.unlink(filler)
    [name] = re.findall(r"sandbox (\S+) \(minimal\) not created",
                        s.read_log())
    wait_until(lambda: not nothing_left(s, name), 30,
               what="nothing left of " + name, logs=[s])
    assert os.listdir(os.path.join(s.state_dir, "workspaces")) == []
    # Room again: sandboxes are made.
    name = s.create()
    assert s.shell(name, "echo ok")["stdout"] == "ok\n"


def test_a_name_taken_in_the_trash_leaves_no_bundle(start_sandboxd):
    """The trash's names count from 0 again at each start, while what the
    last run left there may still be going: a released sandbox's bundle
    takes a free name rather than staying where it was (a rename onto a
    directory that is not empty fails)."""
    s = crun_sandboxd(start_sandboxd)
    name = s.create()
    trash = os.path.join(s.state_dir, "crun", "trash")
    taken = [os.path.join(trash, f"{name}.{i}") for i in range(3)]
    for t in taken:
        os.makedirs(os.path.join(t, "still-going"))
    s.rpc("release", identity=name)
    wait_until(lambda: not os.path.exists(os.path.join(s.crun_bundles,
                                                       name)),
               30, what="the bundle gone", logs=[s])
    # Its own trash entry went too; the ones it passed over are as they
    # were.
    wait_until(lambda: sorted(os.listdir(trash)) ==
               [os.path.basename(t) for t in taken], 30,
               what="only the planted names left in the trash", logs=[s])
    assert all(os.listdir(t) == ["still-going"] for t in taken)
    assert "cannot move the directory" not in s.read_log()
    for t in taken:
        shutil.rmtree(t)
    assert s.shell(s.create(), "echo ok")["stdout"] == "ok\n"


def forward_rules():
    out = subprocess.run(["iptables", "-w", "-S", "FORWARD"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("-A ")]


def test_the_operators_docker_user_rules_come_first(start_sandboxd, scratch):
    """A bridge's forwarding rules go after the jump to DOCKER-USER, where
    an operator's rules for containers are, and one an earlier sandboxd
    put ahead of it is moved there. Nothing is sent: the rules are read."""
    bridge = f"sbf{os.getpid() % 100000}"
    subnet = f"10.252.{os.getpid() % 200 + 20}.0/24"
    jump = "-A FORWARD -j DOCKER-USER"
    made_jump = jump not in forward_rules()
    made_chain = False
    ipt = ["iptables", "-w"]
    try:
        if made_jump:
            made_chain = subprocess.run(ipt + ["-N", "DOCKER-USER"],
                                        capture_output=True).returncode == 0
            subprocess.run(ipt + ["-A", "FORWARD", "-j", "DOCKER-USER"],
                           check=True)
        # Where the previous sandboxd put it: first.
        subprocess.run(ipt + ["-I", "FORWARD", "1", "-i", bridge, "-j",
                              "ACCEPT"], check=True)
        types = write_types(scratch(), {"net": {"from": "minimal",
                                                "network": "bridge"}})
        s = crun_sandboxd(start_sandboxd, args=["--types", types], env={
            "SANDBOXD_BRIDGE": bridge, "SANDBOXD_BRIDGE_SUBNET": subnet})
        name = s.create("net")
        assert s.shell(name, "echo up")["stdout"] == "up\n"
        rules = forward_rules()
        ours = [i for i, r in enumerate(rules) if f" {bridge} " in r]
        assert [rules[i] for i in ours] == [
            f"-A FORWARD -o {bridge} -m conntrack --ctstate "
            "RELATED,ESTABLISHED -j ACCEPT",
            f"-A FORWARD -i {bridge} -j ACCEPT"], rules
        assert min(ours) > rules.index(jump), rules
        s.rpc("release", identity=name)
    finally:
        for r in forward_rules():
            if f" {bridge} " in r:
                subprocess.run(ipt + ["-D"] + r.split()[1:])
        subprocess.run(ipt + ["-t", "nat", "-D", "POSTROUTING", "-s", subnet,
                              "!", "-o", bridge, "-j", "MASQUERADE"],
                       capture_output=True)
        if made_jump:
            subprocess.run(ipt + ["-D", "FORWARD", "-j", "DOCKER-USER"])
        if made_chain:
            subprocess.run(ipt + ["-X", "DOCKER-USER"])
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def test_sigterm_removes_200_live_sandboxes(start_sandboxd):
    n = 200
    s = crun_sandboxd(start_sandboxd, env={
        "POOL_SIZE": str(n), "SANDBOXD_POOL_PARALLEL": "8",
        "SANDBOXD_CREATE_TIMEOUT": "300"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}']
               == n, 600, what=f"{n} warm sandboxes", logs=[s])
    names = list(s.containers())
    assert len(names) == n
    s.signal(signal.SIGTERM)
    assert s.wait_exit(300) == 0
    assert f"shutdown: removed all {n} sandboxes" in s.read_log()
    assert s.containers() == {}
    cgroups = {os.path.basename(p) for p in
               glob.glob("/sys/fs/cgroup/*/sandboxd/*") +
               glob.glob("/sys/fs/cgroup/sandboxd/*")}
    assert not cgroups & set(names)
    assert not os.path.exists(os.path.join(s.state_dir, "crun", "trash"))
