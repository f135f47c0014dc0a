"""run_shell_command in spare shells (agent/shell_spare.c): each semantic of
`bash -c` the issue lists, compared with bash -c itself run here in the
same workspace; no state from one call to the next; a burst beyond the
spares; a replaced workspace; and a background job of one call that tries
to reach the spare of the next (--run-as)."""
import concurrent.futures
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts

SPARE_RE = re.compile(r"command (\d+) runs in a spare shell")


def spare_agent(start_agent, *args):
    a = start_agent("--log-level", "debug", *args)
    wait_spares(a)
    return a


def wait_spares(agent, timeout=10):
    """Until a command runs in a spare (they start in the background)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        before = len(SPARE_RE.findall(agent.read_log()))
        agent.shell("true")
        if len(SPARE_RE.findall(agent.read_log())) > before:
            return
        time.sleep(0.05)
    raise AssertionError("no command ran in a spare shell")


def in_spare(agent, command, **extra):
    """Run command; assert a spare ran it (waiting for one to be ready)."""
    deadline = time.time() + 10
    while True:
        before = len(SPARE_RE.findall(agent.read_log()))
        res = agent.shell(command, **extra)
        if len(SPARE_RE.findall(agent.read_log())) > before:
            return result_texts(res)
        assert time.time() < deadline, "no spare was ready"
        time.sleep(0.1)


def default_signals():
    """The agent starts commands with every signal at its default; the
    test may run with some ignored (nohup, a background job of a
    non-interactive shell, a CI runner), which bash -c would inherit and
    show in `trap -p`."""
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def bash_c(command, cwd):
    """What bash -c answers here, as the agent would put it."""
    p = subprocess.run(["/bin/bash", "-c", command], cwd=cwd,
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=30, preexec_fn=default_signals)
    out = {"stdout": p.stdout, "returncode": str(p.returncode)}
    if p.stderr:
        out["stderr"] = p.stderr
    return out


SEMANTICS = {
    "dollar0": "echo $0 $#; echo \"$@\"",
    "exit_code": "false",
    "exit_code_last": "true; (exit 42)",
    "exit": "echo a; exit 7; echo b",
    "exit_in_function": "f() { exit 5; }; f; echo not reached",
    "syntax_error": "echo a; if then",
    "syntax_error_later_line": "echo a\nif then\necho b",
    "syntax_error_unclosed_quote": "echo 'a",
    "set_e": "set -e; false; echo not reached",
    "set_e_later_line": "set -e\necho one\nfalse\necho not reached",
    "trap_exit": "trap 'echo trapped $?' EXIT; echo body; false",
    "trap_exit_on_exit": "trap 'echo trapped $?' EXIT; exit 3",
    "trap_err": "trap 'echo err $LINENO' ERR; false; echo after",
    "background_job": "sleep 0.2 & echo started; wait $!; echo waited $?",
    "background_jobs_listed": "sleep 0.1 & jobs | wc -l; wait",
    "lineno": "echo $LINENO\necho $LINENO\n\necho $LINENO",
    "command_not_found": "echo a\nno-such-command-xyz\necho $?",
    "return_at_top": "return 3; echo after",
    "execution_string": "echo \"$BASH_EXECUTION_STRING\"",
    "options": "echo $-; shopt -p | sort | md5sum",
    "variables_fresh": "echo ${REPLY-unset} ${IFS@Q} $? ${X-unset}",
    "functions_fresh": "declare -F | grep -c . || true",
    "stdin_empty": "cat; echo cat=$?; readlink /proc/self/fd/0",
    "descriptors": "ls /proc/self/fd",
    "extglob_later_line": "shopt -s extglob\necho @(a|b)",
    "heredoc_unterminated": "cat <<EOF\nhi",
    "backslash_at_end": "echo a \\",
    "brace_closing_early": "echo a; }",
    "pipefail_and_status": "set -o pipefail; false | true; echo $?; "
                           "true | false; echo ${PIPESTATUS[@]}",
}


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_spare_behaves_as_bash_c(start_agent, tmp_workspace, name):
    a = spare_agent(start_agent)
    command = SEMANTICS[name]
    got = in_spare(a, command)
    want = bash_c(command, tmp_workspace)
    # bash names itself as invoked: /bin/bash in the agent, as here.
    assert got == want, (command, got, want)


# Texts written to get out of a parse check that wraps them (a function
# body, a group): what they do, output and files, must be what bash -c
# does with them, and nothing of them may run before or besides that.
HOSTILE_SHAPES = {
    "brace_closes_early": "echo one\n}\necho two >> side_effect.txt; "
                          "echo two\n{ :",
    "brace_closes_early_one_line": "echo a; }; echo b > side_effect.txt",
    "braces_close_twice": "}\n}\necho x > side_effect.txt",
    "brace_left_open": "{ echo a > side_effect.txt",
    "brace_in_heredoc": "cat <<EOF\n}\nEOF\necho after > side_effect.txt",
    "code_in_quoted_heredoc": "cat <<'EOF'\n}\necho inside > "
                              "side_effect.txt\nEOF\necho after",
    "brace_after_heredoc": "cat <<EOF\nx\nEOF\n}\necho y > "
                           "side_effect.txt",
    "heredoc_left_open_with_brace": "cat <<EOF\n}\necho z > "
                                    "side_effect.txt",
    "case_arm_brace": "case } in\n}) echo brace > side_effect.txt;;\n"
                      "esac\ncase x in x) echo x;; esac",
    "case_arm_closes_early": "case x in x) }\necho y > side_effect.txt;; "
                             "esac",
    "brace_in_substitution": "echo $(echo })\n}\necho z > side_effect.txt",
    "wrapper_named_old": "__sbx_parse(){ echo mine; }; __sbx_parse; "
                         "declare -F",
    "wrapper_named_new": "__sbx_check(){ echo mine > side_effect.txt; }; "
                         "__sbx_check; declare -F",
    "wrapper_called_then_brace": "__sbx_check\n}\n__sbx_parse",
    "noexec_undone_then_brace": "set +n; echo x > side_effect.txt\n}",
    "noexec_set": "set -n; echo hidden > side_effect.txt",
    "local_dash_at_top": "local -; set -n\necho hidden > side_effect.txt",
    "return_then_brace": "return 0\n}\necho w > side_effect.txt",
    "function_left_open": "f() {\necho f > side_effect.txt",
}


def workspace_files(ws):
    """{name: content} of the workspace, emptied."""
    out = {}
    for name in sorted(os.listdir(ws)):
        path = os.path.join(ws, name)
        with open(path) as f:
            out[name] = f.read()
        os.remove(path)
    return out


@pytest.mark.parametrize("name", sorted(HOSTILE_SHAPES))
def test_hostile_text_behaves_as_bash_c(start_agent, tmp_workspace, name):
    a = spare_agent(start_agent)
    command = HOSTILE_SHAPES[name]
    deadline = time.time() + 10
    while True:
        workspace_files(tmp_workspace)
        before = len(SPARE_RE.findall(a.read_log()))
        got = result_texts(a.shell(command))
        if len(SPARE_RE.findall(a.read_log())) > before:
            break
        assert time.time() < deadline, "no spare was ready"
        time.sleep(0.1)
    got_files = workspace_files(tmp_workspace)
    want = bash_c(command, tmp_workspace)
    want_files = workspace_files(tmp_workspace)
    assert (got, got_files) == (want, want_files), command


def test_spare_runs_in_its_own_group_as_a_fresh_shell(start_agent):
    a = spare_agent(start_agent)
    out = in_spare(a, "ps -o pid=,pgid= -p $$; echo $SHLVL")["stdout"]
    pid, pgid = out.split()[:2]
    assert pid == pgid
    assert out.split()[2] == result_texts(
        a.shell("echo $SHLVL", timeout=30))["stdout"].strip()


def test_no_state_from_one_call_to_the_next(start_agent, tmp_workspace):
    a = spare_agent(start_agent)
    in_spare(a, "cd /; X=1; export Y=2; f() { :; }; alias ll=ls; "
                "set -o noglob; shopt -s extglob; trap 'echo t' EXIT; "
                "umask 077; ulimit -n 64; echo x > /proc/self/fd/1")
    probe = ("pwd; echo ${X-unset} ${Y-unset}; type -t f || echo nof; "
             "alias; set -o | grep noglob; shopt extglob; trap -p; umask; "
             "ulimit -n")
    got = in_spare(a, probe)
    want = bash_c(probe, tmp_workspace)
    want["stdout"] = want["stdout"].replace(
        os.path.realpath(tmp_workspace), tmp_workspace)
    # Our own limits and umask are the agent's (the test's): the same.
    assert got == want
    # A command's own ulimit is not a spare spoilt (test_hostile_shell.py).
    assert "dropped" not in a.read_log()


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_and_output_cap_in_a_spare(start_agent, stream):
    a = spare_agent(start_agent, "--output-cap", "1K")
    if not stream:
        texts = in_spare(a, "head -c 5000 /dev/zero | tr '\\0' x; "
                            "sleep 60.913", timeout=1)
        assert texts["returncode"] == "-9" and "timed out" in texts["stderr"]
        assert texts["stdout"].startswith("x" * 1024)
        assert "truncated" in texts["stdout"]
    else:
        import json
        r = a.post("/tools/run_shell_command",
                   {"command": "echo one; sleep 60.913", "stream": True,
                    "timeout": 1}, stream=True)
        events = [json.loads(l) for l in r.iter_lines() if l]
        assert events[0]["type"] == "start" and events[0]["pid"] > 0
        assert ("stdout", "one\n") in [(e["type"], e.get("data"))
                                       for e in events]
        assert events[-1]["timed_out"] is True


def test_burst_beyond_the_spares_falls_back(start_agent):
    a = spare_agent(start_agent, "--shell-spares", "2")

    def run(i):
        import requests
        s = requests.Session()
        s.headers["Authorization"] = "Bearer test-token"
        r = s.post(a.url + "/tools/run_shell_command",
                   json={"command": f"sleep 0.3; echo {i}"})
        assert r.status_code == 200, r.text
        return result_texts(r.json())

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        outs = list(ex.map(run, range(16)))
    assert [o["stdout"] for o in outs] == [f"{i}\n" for i in range(16)]
    assert all(o["returncode"] == "0" for o in outs)
    log = a.read_log()
    assert "runs in a shell started for it" in log
    assert "runs in a spare shell" in log
    # And the spares come back.
    in_spare(a, "true")


def test_spares_off(start_agent):
    a = start_agent("--log-level", "debug", "--shell-spares", "0")
    assert result_texts(a.shell("echo hi"))["stdout"] == "hi\n"
    time.sleep(0.3)
    assert result_texts(a.shell("echo hi"))["stdout"] == "hi\n"
    assert "runs in a spare shell" not in a.read_log()


def test_replaced_workspace_is_the_cwd(start_agent, tmp_workspace):
    """A spare started in a workspace since removed and made again must
    not run the next command in the old (deleted) directory."""
    a = spare_agent(start_agent)
    os.rename(tmp_workspace, tmp_workspace + ".old")
    os.mkdir(tmp_workspace)
    open(os.path.join(tmp_workspace, "new.txt"), "w").close()
    out = result_texts(a.shell("ls; readlink /proc/self/cwd"))["stdout"]
    assert out.split()[0] == "new.txt"
    assert "deleted" not in out and ".old" not in out
    in_spare(a, "true")     # spares of the new one
    assert result_texts(a.shell("ls"))["stdout"] == "new.txt\n"


def children(pid):
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, ValueError):
            pass
    return out


def test_a_spare_killed_while_idle_is_replaced(start_agent):
    a = spare_agent(start_agent)
    time.sleep(0.3)
    # The agent's idle spares: the programs under its keepers, and only
    # those (no other process of the machine is touched).
    spares = [c for k in children(a.proc.pid) for c in children(k)]
    assert spares
    for pid in spares:
        os.kill(pid, 9)
    deadline = time.time() + 10
    while a.read_log().count("exited unused") < len(spares):
        assert time.time() < deadline, a.read_log()
        time.sleep(0.05)
    assert result_texts(a.shell("echo ok"))["stdout"] == "ok\n"
    in_spare(a, "true")


# A background job left by one call: for 3 s, every descriptor of every
# process under the agent (argv[2]) it can open through /proc (for
# writing, and for reading) is noted, and written into; and of a sleep of
# its own, which it can reach, to show that it looks. Only there: other
# processes of the same user on this machine are not the test's.
SNOOPER = r"""
import os, subprocess, sys, time
me, log, agent = os.getpid(), open(sys.argv[1], "a"), int(sys.argv[2])
sleep = subprocess.Popen(["sleep", "7.123"]).pid


def under_agent(pid):
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
        if pid == agent:
            return True
    return False


end = time.time() + 3
while time.time() < end:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (me, os.getppid()) or not (
                int(pid) == sleep or under_agent(int(pid))):
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            for mode in (os.O_WRONLY, os.O_RDONLY):
                try:
                    f = os.open(f"/proc/{pid}/fd/{fd}", mode | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    comm = open(f"/proc/{pid}/comm").read().strip()
                except OSError:
                    comm = "?"
                log.write(f"{pid} {fd} {mode} {comm}\n"); log.flush()
                try:
                    if mode == os.O_WRONLY:
                        os.write(f, b"INJECTED\n")
                    else:
                        os.read(f, 65536)
                except OSError:
                    pass
                os.close(f)
    time.sleep(0.01)
"""


def test_a_background_job_cannot_reach_the_next_spare(start_agent,
                                                      tmp_workspace):
    if os.geteuid() != 0:
        pytest.fail("this test needs root, as the agent in a container has")
    os.chmod(os.path.dirname(tmp_workspace), 0o711)     # mkdtemp's 0700
    os.chmod(tmp_workspace, 0o777)
    snoop_log = os.path.join(tmp_workspace, "snoop.log")
    script = os.path.join(tmp_workspace, "snoop.py")
    with open(script, "w") as f:
        f.write(SNOOPER)
    a = spare_agent(start_agent, "--run-as", "65534:65534")
    in_spare(a, f"{SYSTEM_PYTHON} {script} {snoop_log} {a.proc.pid} "
                ">/dev/null 2>&1 </dev/null & echo started")
    time.sleep(0.5)     # it has looked at the spares a few times over
    # Builtins only: the call's processes are its bash alone, which the
    # job must not reach either, idle or running.
    for i in range(5):
        texts = in_spare(a, f"echo clean {i}; for ((j = 0; j < 20000; "
                            f"j++)); do :; done")
        assert texts == {"stdout": f"clean {i}\n", "returncode": "0"}
    time.sleep(3)
    opened = open(snoop_log).read() if os.path.exists(snoop_log) else ""
    assert " sleep\n" in opened, opened
    assert [l for l in opened.splitlines()
            if l.split()[3] in ("bash", "sandbox-agent")] == [], opened
