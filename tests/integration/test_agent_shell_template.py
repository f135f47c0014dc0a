"""run_shell_command forked from the shell template (agent/shell_template.c,
agent/bash/shell_template_bash.c): each semantic of `bash -c`, compared
with bash -c itself, run here in the same workspace or by an agent without
the template (--shell-template false, the same environment and user);
what bash sets at its start ($$, PPID, the user's ids, every variable and
option), the process a command is (ids, capabilities, seccomp, limits);
no state from one call to the next; a burst; a replaced workspace; a
template or waiting pair killed; and a background job of one call that
tries to reach the next (--run-as)."""
import concurrent.futures
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts

FORKED_RE = re.compile(r"command forked from the shell template")
READY_RE = re.compile(r"shell template ready \(pid (\d+)\)")


def template_agent(start_agent, *args, **kw):
    a = start_agent("--log-level", "debug", *args, **kw)
    wait_template(a)
    return a


def wait_template(agent, timeout=10):
    """Until the template is ready (it starts in the background)."""
    deadline = time.time() + timeout
    while not READY_RE.search(agent.read_log()):
        assert time.time() < deadline, agent.read_log()
        time.sleep(0.02)


def template_pid(agent):
    return int(READY_RE.findall(agent.read_log())[-1])


def in_template(agent, command, **extra):
    """Run command; assert the template forked it."""
    before = len(FORKED_RE.findall(agent.read_log()))
    res = agent.shell(command, **extra)
    assert len(FORKED_RE.findall(agent.read_log())) == before + 1, \
        agent.read_log()[-2000:]
    return result_texts(res)


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
def test_template_behaves_as_bash_c(start_agent, tmp_workspace, name):
    a = template_agent(start_agent)
    command = SEMANTICS[name]
    got = in_template(a, command)
    want = bash_c(command, tmp_workspace)
    # bash names itself as invoked: /bin/bash in the agent, as here.
    assert got == want, (command, got, want)


# Texts written to get out of a parse check that wraps them (a function
# body, a group), as the spare shells had: what they do, output and
# files, must be what bash -c does with them, and nothing of them may run
# before or besides that.
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
    a = template_agent(start_agent)
    command = HOSTILE_SHAPES[name]
    workspace_files(tmp_workspace)
    got = in_template(a, command)
    got_files = workspace_files(tmp_workspace)
    want = bash_c(command, tmp_workspace)
    want_files = workspace_files(tmp_workspace)
    assert (got, got_files) == (want, want_files), command


def test_template_command_runs_in_its_own_group_as_a_fresh_shell(
        start_agent):
    a = template_agent(start_agent)
    out = in_template(a, "ps -o pid=,pgid= -p $$; echo $SHLVL")["stdout"]
    pid, pgid = out.split()[:2]
    assert pid == pgid
    assert out.split()[2] == result_texts(
        a.shell("echo $SHLVL", timeout=30))["stdout"].strip()


# What bash sets at its start and what the process is, as a command sees
# them: values that differ from one process to the next are shown by what
# they are ($$ the shell's pid, PPID its parent's, whose parent is the
# agent; RANDOM and the clocks masked), all else as it is.
# /proc/$$/status is read by bash itself: a child reading it can find
# bash still in its fork, with SIGCHLD, SIGINT and SIGTERM blocked.
START_PROBE = r"""
read -ra s </proc/$$/stat; read -ra k </proc/$PPID/stat
echo "\$\$ is me: $(( s[0] == $$ && BASHPID == $$ ))," \
     "PPID is my parent: $(( s[3] == PPID ))," \
     "whose parent is $(cat /proc/${k[3]}/comm)," \
     "my group: $(( s[4] == $$ )), a subshell: $( echo $(( BASHPID != $$ )) )"
echo "SHLVL=$SHLVL BASH_SUBSHELL=$BASH_SUBSHELL flags=$- \$0=$0 \$#=$#"
echo "nice ${s[18]} policy ${s[40]}"
unset s k
set -o; shopt; trap -p; ulimit -Sa; ulimit -Ha; umask; umask -S
declare -p | sed -E 's/^(declare -[^ ]+ (BASHPID|PPID|RANDOM|SRANDOM|SECONDS|EPOCHSECONDS|EPOCHREALTIME))=.*/\1=X/'
declare -f; alias; hash; jobs -l; dirs; enable -a | md5sum
cat /proc/$$/oom_score_adj
while read -r l; do [[ $l =~ ^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp(_filters)?|Sig(Blk|Ign|Cgt)|Cpus_allowed_list|Threads|TracerPid): ]] && echo "$l"; done </proc/$$/status; unset l
fds=(/proc/$$/fd/*); echo "fds ${fds[*]##*/}"; unset fds
[ -c /proc/$$/fd/0 ] && [ -p /proc/$$/fd/1 ] && [ -p /proc/$$/fd/2 ] && echo stdio
id; [ -O . ] && echo owner; [ -G /etc/passwd ] && echo group-of-passwd
test -r /etc/shadow && echo shadow-readable
echo "$HOME $SHELL ${PS4@Q} $UID $EUID ${GROUPS[*]} $USER $LOGNAME"
"""


@pytest.mark.parametrize("user", ["root", "run-as"])
def test_template_starts_as_bash_c(start_agent, tmp_workspace, user):
    """Everything bash sets at its start and everything the process is,
    against the same agent without the template: the plain path, a
    bash -c executed for the command (same environment, user, workspace).
    Nothing of the template's shows: no variable, function, builtin,
    option or descriptor of its own."""
    args = ()
    if user == "run-as":
        if os.geteuid() != 0:
            pytest.fail("this test needs root, as the agent in a "
                        "container has")
        os.chmod(os.path.dirname(tmp_workspace), 0o711)
        os.chmod(tmp_workspace, 0o777)
        args = ("--run-as", "65534:65534")
    a = template_agent(start_agent, *args)
    plain = start_agent("--shell-template", "false", *args)
    got = in_template(a, START_PROBE)
    want = result_texts(plain.shell(START_PROBE))
    assert got["stdout"].startswith("$$ is me: 1, PPID is my parent: 1, "
                                    "whose parent is sandbox-agent, my "
                                    "group: 1, a subshell: 1\n"), got
    import difflib
    assert got == want, "\n".join(difflib.unified_diff(
        (want.get("stdout", "") + want.get("stderr", "")).splitlines(),
        (got.get("stdout", "") + got.get("stderr", "")).splitlines(),
        "plain", "template", lineterm=""))


def test_no_state_from_one_call_to_the_next(start_agent, tmp_workspace):
    a = template_agent(start_agent)
    in_template(a, "cd /; X=1; export Y=2; f() { :; }; alias ll=ls; "
                "set -o noglob; shopt -s extglob; trap 'echo t' EXIT; "
                "umask 077; ulimit -n 64; echo x > /proc/self/fd/1")
    probe = ("pwd; echo ${X-unset} ${Y-unset}; type -t f || echo nof; "
             "alias; set -o | grep noglob; shopt extglob; trap -p; umask; "
             "ulimit -n")
    got = in_template(a, probe)
    want = bash_c(probe, tmp_workspace)
    want["stdout"] = want["stdout"].replace(
        os.path.realpath(tmp_workspace), tmp_workspace)
    # Our own limits and umask are the agent's (the test's): the same.
    assert got == want


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_and_output_cap(start_agent, stream):
    """In the template; a stream takes the plain path."""
    a = template_agent(start_agent, "--output-cap", "1K")
    if not stream:
        texts = in_template(a, "head -c 5000 /dev/zero | tr '\\0' x; "
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


def test_a_burst_forks_each_command_from_the_template(start_agent):
    """16 callers at once: each command its own process ($$ never
    shared), its own output and status, all forked from the template."""
    a = template_agent(start_agent)

    def run(i):
        import requests
        s = requests.Session()
        s.headers["Authorization"] = "Bearer test-token"
        r = s.post(a.url + "/tools/run_shell_command",
                   json={"command": f"echo $$; sleep 0.3; echo {i}; "
                                    f"exit {i % 7}"})
        assert r.status_code == 200, r.text
        return result_texts(r.json())

    before = len(FORKED_RE.findall(a.read_log()))
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        outs = list(ex.map(run, range(16)))
    assert [o["stdout"].split()[1] for o in outs] == \
        [str(i) for i in range(16)]
    assert [o["returncode"] for o in outs] == \
        [str(i % 7) for i in range(16)]
    assert len({o["stdout"].split()[0] for o in outs}) == 16
    assert len(FORKED_RE.findall(a.read_log())) == before + 16


def test_template_off(start_agent):
    a = start_agent("--log-level", "debug", "--shell-template", "false")
    assert result_texts(a.shell("echo hi"))["stdout"] == "hi\n"
    time.sleep(0.3)
    assert result_texts(a.shell("echo hi"))["stdout"] == "hi\n"
    log = a.read_log()
    assert "shell template" not in log
    assert "runs in a shell started for it" in log


def test_replaced_workspace_is_the_cwd(start_agent, tmp_workspace):
    """A template started in a workspace since removed and made again must
    not run the next command in the old (deleted) directory."""
    a = template_agent(start_agent)
    first = template_pid(a)
    os.rename(tmp_workspace, tmp_workspace + ".old")
    os.mkdir(tmp_workspace)
    open(os.path.join(tmp_workspace, "new.txt"), "w").close()
    out = result_texts(a.shell("ls; readlink /proc/self/cwd"))["stdout"]
    assert out.split()[0] == "new.txt"
    assert "deleted" not in out and ".old" not in out
    deadline = time.time() + 10
    while template_pid(a) == first:     # a template of the new one
        assert time.time() < deadline, a.read_log()
        time.sleep(0.02)
    assert in_template(a, "ls; readlink /proc/self/cwd")["stdout"] == \
        f"new.txt\n{tmp_workspace}\n"


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


def waiting_pairs(agent):
    """The template's keepers (the agent's children but the template)
    and their commands that wait for a request."""
    tpl = template_pid(agent)
    keepers = [k for k in children(agent.proc.pid) if k != tpl]
    return keepers, [c for k in keepers for c in children(k)]


def test_a_template_or_a_waiting_pair_killed_is_replaced(start_agent):
    """As root (no --run-as), commands could do this: calls go on."""
    a = template_agent(start_agent)
    deadline = time.time() + 10
    while True:
        keepers, commands = waiting_pairs(a)
        if len(keepers) == len(commands) == 2:
            break
        assert time.time() < deadline, (keepers, commands)
        time.sleep(0.02)
    # A keeper whose command died ends, and a command whose keeper
    # died too (its parent-death signal). (A request that reaches a
    # command whose keeper is dying ends as killed: only root can do
    # this, so the test waits for them to go.)
    killed = [keepers[0], commands[1]]
    for pid in killed:
        os.kill(pid, 9)
    # Two wait again (one killed silently is counted within a second).
    while True:
        keepers, commands = waiting_pairs(a)
        if len(keepers) == len(commands) == 2 and \
                not set(killed) & set(keepers + commands):
            break
        assert time.time() < deadline + 5, (keepers, commands)
        time.sleep(0.05)
    assert in_template(a, "echo ok")["stdout"] == "ok\n"
    first = template_pid(a)
    os.kill(first, 9)
    deadline = time.time() + 10
    while template_pid(a) == first:     # started again after a second
        assert result_texts(a.shell("echo ok"))["stdout"] == "ok\n"
        assert time.time() < deadline, a.read_log()
        time.sleep(0.05)
    assert "exited (status 9)" in a.read_log()
    assert in_template(a, "echo ok")["stdout"] == "ok\n"


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


def test_a_background_job_cannot_reach_the_next_command(start_agent,
                                                        tmp_workspace):
    if os.geteuid() != 0:
        pytest.fail("this test needs root, as the agent in a container has")
    os.chmod(os.path.dirname(tmp_workspace), 0o711)     # mkdtemp's 0700
    os.chmod(tmp_workspace, 0o777)
    snoop_log = os.path.join(tmp_workspace, "snoop.log")
    script = os.path.join(tmp_workspace, "snoop.py")
    with open(script, "w") as f:
        f.write(SNOOPER)
    a = template_agent(start_agent, "--run-as", "65534:65534")
    in_template(a, f"{SYSTEM_PYTHON} {script} {snoop_log} {a.proc.pid} "
                ">/dev/null 2>&1 </dev/null & echo started")
    time.sleep(0.5)     # it has looked at the template a few times over
    # Builtins only: the call's processes are its bash alone, which the
    # job must not reach either, idle or running.
    for i in range(5):
        texts = in_template(a, f"echo clean {i}; for ((j = 0; j < 20000; "
                            f"j++)); do :; done")
        assert texts == {"stdout": f"clean {i}\n", "returncode": "0"}
    time.sleep(3)
    opened = open(snoop_log).read() if os.path.exists(snoop_log) else ""
    assert " sleep\n" in opened, opened
    assert [l for l in opened.splitlines()
            if l.split()[3] in ("bash", "sandbox-agent")] == [], opened
