"""Hostile input, spare shells (issue 23): a background job of the run-as
user, left by one call, spoils the idle spare shells (agent/shell_spare.c)
that the next calls would run in. The kernel lets a process stop, re-limit,
renice, pin or deprioritise any process of the same user, undumpable or
not, and a spare's command line tells it from other shells. The next
command must still start as a fresh `bash -c` would: the agent checks the
spare it takes and drops a spoilt one. Each test fails on the agent before
that check.

The job finds the spares through the agent's own process tree (children of
its keepers, the agent's children), never by name across the machine.
"""
import ctypes
import os
import shutil
import threading
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts
from test_agent_shell_spare import children, in_spare, spare_agent

# What a command sees of the state it was started in: limits, nice and
# scheduling policy, CPUs, I/O priority, whether it is stopped or traced,
# and that it can write a file and open descriptors.
PROBE = ("ulimit -Sa; ulimit -Ha; read -ra f </proc/$$/stat; "
         "echo nice ${f[18]} policy ${f[40]}; "
         "while read -r k v; do case $k in State:|TracerPid:|"
         "Cpus_allowed_list:) echo $k $v;; esac; done </proc/$$/status; "
         "ionice -p $$; echo written >probe.txt && cat probe.txt; "
         "exec 5</dev/null 6</dev/null 7</dev/null && echo descriptors")

SPARE_MARK = b"read -rN1 -u3"

# The job: for a second, every idle spare of the agent (argv[1]) it finds
# is spoilt one way (argv[2]); then it writes how many, and any error, to
# argv[3].
SPOILER = r"""
import os, resource, signal, subprocess, sys, time
agent, how, report = int(sys.argv[1]), sys.argv[2], sys.argv[3]
mine = {os.getpid(), os.getppid()}


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def idle_spares():
    parents = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(p)] = parent(p)
        except (OSError, ValueError):
            pass
    keepers = {p for p, pp in parents.items() if pp == agent}
    for p, pp in parents.items():
        if pp in keepers and p not in mine:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if MARK in f.read():
                        yield p
            except OSError:
                pass


def spoil(pid):
    if how == "stop":
        os.kill(pid, signal.SIGSTOP)
    elif how == "nofile":
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (4, 4))
    elif how == "fsize":
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, 0))
    elif how == "nice":
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    elif how == "affinity":
        os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})
    elif how == "sched_idle":
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    elif how == "ioprio":
        subprocess.run(["ionice", "-c", "3", "-p", str(pid)], check=True)


spoilt, errors = set(), []
end = time.time() + 1
while time.time() < end:
    for pid in idle_spares():
        if pid not in spoilt:
            try:
                spoil(pid)
                spoilt.add(pid)
            except (OSError, subprocess.CalledProcessError) as e:
                errors.append(repr(e))
    time.sleep(0.02)
with open(report + ".tmp", "w") as f:
    f.write(f"{len(spoilt)} {errors}\n")
os.rename(report + ".tmp", report)
""".replace("MARK", repr(SPARE_MARK))


def run_as_workspace(tmp_workspace):
    """The workspace, writable by the run-as user (mkdtemp made 0700)."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root, as the agent in a container has")
    os.chmod(os.path.dirname(tmp_workspace), 0o711)
    os.chmod(tmp_workspace, 0o777)


def wait_file(path, timeout=30):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never came"
        time.sleep(0.05)
    with open(path) as f:
        return f.read()


def probe(agent):
    texts = result_texts(agent.shell(PROBE, timeout=5))
    if os.path.exists(os.path.join(agent.workspace, "probe.txt")):
        os.remove(os.path.join(agent.workspace, "probe.txt"))
    return texts


SPOILS = ["stop", "nofile", "fsize", "nice", "affinity", "sched_idle",
          "ioprio"]


@pytest.mark.parametrize("how", SPOILS)
def test_a_job_of_the_user_cannot_spoil_the_next_spare(start_agent,
                                                       tmp_workspace, how):
    if how == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no affinity to take away")
    if how == "ioprio" and shutil.which("ionice") is None:
        pytest.skip("no ionice here")
    run_as_workspace(tmp_workspace)
    script = os.path.join(tmp_workspace, "spoil.py")
    with open(script, "w") as f:
        f.write(SPOILER)
    report = os.path.join(tmp_workspace, "spoil.report")
    a = spare_agent(start_agent, "--run-as", "65534:65534")
    # As a command started now would be: in a spare (the same as by
    # bash -c: test_agent_shell_spare.py).
    want = in_spare(a, PROBE, timeout=5)
    os.remove(os.path.join(tmp_workspace, "probe.txt"))
    a.shell(f"{SYSTEM_PYTHON} {script} {a.proc.pid} {how} {report} "
            ">/dev/null 2>&1 </dev/null & echo started")
    count, errors = wait_file(report).split(" ", 1)
    assert errors.strip() == "[]" and int(count) >= 2, (count, errors)
    # Every spare there is has been spoilt: the next call takes one.
    assert probe(a) == want
    assert "re-prioritised while idle: dropped" in a.read_log()
    # Spares come back, and they are sound.
    assert in_spare(a, PROBE, timeout=5) == want


PTRACE_SEIZE, PTRACE_CONT, WALL = 0x4206, 7, 0x40000000


def trace(pids, seized, errors):
    """Seize pids (this thread is their tracer) and let them run on until
    each has exited and been reaped here, so their keeper can reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p,
                            ctypes.c_void_p]
    left = []
    for pid in pids:
        if libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0:
            left.append(pid)
        else:
            errors.append(os.strerror(ctypes.get_errno()))
    seized.set()
    while left:
        for pid in list(left):
            got, status = os.waitpid(pid, os.WNOHANG | WALL)
            if got == 0:
                continue
            if os.WIFSTOPPED(status):
                sig = os.WSTOPSIG(status) if status >> 16 == 0 else 0
                libc.ptrace(PTRACE_CONT, pid, None, sig)
            else:
                left.remove(pid)
        time.sleep(0.01)


def test_a_traced_spare_is_not_used(start_agent, tmp_workspace):
    """Tracing a spare needs more than its user has (it is undumpable and
    its user's processes cannot ptrace); root here traces them, and the
    next call must not run under that tracer."""
    run_as_workspace(tmp_workspace)
    a = spare_agent(start_agent, "--run-as", "65534:65534")
    want = in_spare(a, PROBE, timeout=5)
    os.remove(os.path.join(tmp_workspace, "probe.txt"))
    deadline = time.time() + 10
    while True:
        spares = []
        for k in children(a.proc.pid):
            for c in children(k):
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    if SPARE_MARK in f.read():
                        spares.append(c)
        if len(spares) >= 2:
            break
        assert time.time() < deadline, "the spares did not come back"
        time.sleep(0.05)
    seized, errors = threading.Event(), []
    tracer = threading.Thread(target=trace, args=(spares, seized, errors),
                              daemon=True)
    tracer.start()
    seized.wait()
    assert errors == []
    assert probe(a) == want
    assert "re-prioritised while idle: dropped" in a.read_log()
