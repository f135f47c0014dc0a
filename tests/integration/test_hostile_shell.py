"""Hostile input, the shell template (issues 23 and 27): a background job of
the run-as user, left by one call, goes for what the next calls are made
from: the template (agent/shell_template.c) and the pairs waiting in it,
each a keeper and the command that will take the next request. The kernel
lets a process stop, re-limit, renice, pin, deprioritise or trace any
process of the same user; the template and its pairs are root's and
undumpable, so every attempt must fail, and the next command must start
as a fresh `bash -c` would. On the agent before the template (its idle
spare shells ran as the user) the same attempts succeed: each test fails
there.

The job finds its targets through the agent's own process tree (the
agent's children and theirs, but its own ancestors), never by name across
the machine.
"""
import json
import os
import shutil
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts
from test_agent_shell_template import in_template, template_agent

# What a command sees of the state it was started in: limits, nice and
# scheduling policy, CPUs, I/O priority, whether it is stopped or traced,
# and that it can write a file and open descriptors.
PROBE = ("ulimit -Sa; ulimit -Ha; read -ra f </proc/$$/stat; "
         "echo nice ${f[18]} policy ${f[40]}; "
         "while read -r k v; do case $k in State:|TracerPid:|"
         "Cpus_allowed_list:) echo $k $v;; esac; done </proc/$$/status; "
         "ionice -p $$; echo written >probe.txt && cat probe.txt; "
         "exec 5</dev/null 6</dev/null 7</dev/null && echo descriptors")

# The job: for a second, every process under the agent (argv[1]) but its
# own ancestors is spoilt one way (argv[2]), each once; then it writes how
# many it tried and the names of the errors (one per failure) to argv[3].
SPOILER = r"""
import ctypes, json, os, resource, signal, subprocess, sys, time
agent, how, report = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p,
                        ctypes.c_void_p]


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def ancestors(pid):
    out = {pid}
    while pid > 1:
        pid = parent(pid)
        out.add(pid)
    return out


mine = ancestors(os.getpid())


def targets():
    for p in filter(str.isdigit, os.listdir("/proc")):
        p = int(p)
        try:
            if p not in mine and agent in ancestors(p) and p != agent:
                yield p
        except (OSError, ValueError):
            pass


def spoil(pid):
    if how == "stop":
        os.kill(pid, signal.SIGSTOP)
    elif how == "kill":
        os.kill(pid, signal.SIGKILL)
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
        r = subprocess.run(["ionice", "-c", "3", "-p", str(pid)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise PermissionError(r.stderr.strip())
    elif how == "trace":
        if libc.ptrace(0x4206, pid, None, None) != 0:  # PTRACE_SEIZE
            raise OSError(ctypes.get_errno(), "ptrace")


tried, errors = set(), []
end = time.time() + 1
while time.time() < end:
    for pid in targets():
        if pid not in tried:
            tried.add(pid)
            try:
                spoil(pid)
            except OSError as e:
                errors.append(type(e).__name__)
    time.sleep(0.02)
with open(report + ".tmp", "w") as f:
    json.dump({"tried": len(tried), "errors": errors}, f)
os.rename(report + ".tmp", report)
"""


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


SPOILS = ["stop", "kill", "nofile", "fsize", "nice", "affinity",
          "sched_idle", "ioprio", "trace"]


@pytest.mark.parametrize("how", SPOILS)
def test_a_job_of_the_user_cannot_reach_the_template(start_agent,
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
    a = template_agent(start_agent, "--run-as", "65534:65534")
    # As a command started now would be (the same as by bash -c:
    # test_agent_shell_template.py).
    want = in_template(a, PROBE, timeout=5)
    os.remove(os.path.join(tmp_workspace, "probe.txt"))
    in_template(a, f"{SYSTEM_PYTHON} {script} {a.proc.pid} {how} {report} "
                   ">/dev/null 2>&1 </dev/null & echo started")
    got = json.loads(wait_file(report))
    # The template and two waiting pairs at least, and not one let it.
    assert got["tried"] >= 5, got
    assert got["errors"] == ["PermissionError"] * got["tried"], got
    # The next calls are forked from the template, as they would be.
    for _ in range(3):
        assert in_template(a, PROBE, timeout=5) == want
        os.remove(os.path.join(tmp_workspace, "probe.txt"))
    assert "exited" not in a.read_log()
