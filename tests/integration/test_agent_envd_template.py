"""envd's Start of bash -c and bash -l -c (how E2B's SDKs run every
command) through the shell template (agent/envd_process.c,
agent/bash/shell_template_start.c): a fork of the template's bash made
into a bash started anew with the call's argv, environment, user and
directory, by bash's own start-up code. Each call is compared with the
same Start on an agent without the template (--shell-template false),
which executes /bin/bash for it, both as root with --run-as as every
image runs: what bash sets at its start and what the process is, what
the login profile and $BASH_ENV do, the environment's functions, options
and locale, output, exit status and stdin; and a command that cannot
start fails its call as an exec would."""
import difflib
import os
import re
import shutil
import tempfile

import pytest

from envd_client import Envd, b64, collect
from test_agent_envd import RUN_AS, USER, box  # noqa: F401 (a fixture)
from test_agent_shell_template import START_PROBE, wait_template

TEMPLATED_RE = re.compile(r"started from the shell template")


@pytest.fixture
def home():
    """A home of the user's with a profile, a .bashrc and a BASH_ENV file
    that show what they did, under a directory anyone may enter."""
    base = tempfile.mkdtemp(prefix="envd-home-")
    os.chmod(base, 0o755)
    h = os.path.join(base, "home")
    os.mkdir(h)
    files = {
        ".profile": "echo profile-out; echo profile-err >&2\n"
                    "export FROM_PROFILE=\"$0 $# $-\"\n"
                    "pf() { echo \"pf $*\"; }\n"
                    "alias pa='echo alias-from-profile'\n"
                    "shopt -s expand_aliases; set -o noglob; umask 027\n"
                    "trap 'echo exit-trap-from-profile $?' EXIT\n"
                    "PATH=$HOME/bin:$PATH; cd /tmp\n"
                    ". \"$HOME/.bashrc\"\n",
        ".bashrc": "FROM_BASHRC=yes\n",
        "env.sh": "FROM_BASH_ENV=\"$FROM_PROFILE\"\n",
    }
    for name, text in files.items():
        with open(os.path.join(h, name), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(h, "bin"))
    for p in [h] + [os.path.join(h, n) for n in (*files, "bin")]:
        os.chown(p, USER.pw_uid, USER.pw_gid)
    yield h
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pair(start_agent, box):
    """(the agent with the template, the agent without), both as root
    with --run-as, /init's workdir the user's directory."""
    os.chmod(os.path.dirname(box.user), 0o755)
    a = start_agent("--run-as", RUN_AS, "--log-level", "debug")
    wait_template(a)
    plain = start_agent("--run-as", RUN_AS, "--shell-template", "false")
    for agent in (a, plain):
        r = agent.post("/envd/init", {"defaultWorkdir": box.user})
        assert r.status_code == 204, r.text
    return a, plain


def start(agent, args, envs=None, cwd=None, stdin=None):
    process = {"cmd": "/bin/bash", "args": args}
    if envs is not None:
        process["envs"] = envs
    if cwd is not None:
        process["cwd"] = cwd
    fields = {} if stdin is None else {"stdin": stdin}
    return Envd(agent).start("", process=process, **fields)


def run(agent, args, **kw):
    """(stdout, stderr, end event) of a Start read to its end."""
    s, _ = start(agent, args, **kw)
    out, err, end = collect(s)
    return out.decode(), err.decode(), end


def templated(agent, args, **kw):
    """run(), asserting the template started it."""
    before = len(TEMPLATED_RE.findall(agent.read_log()))
    got = run(agent, args, **kw)
    assert len(TEMPLATED_RE.findall(agent.read_log())) == before + 1, \
        agent.read_log()[-2000:]
    return got


def same(got, want):
    assert got == want, "\n".join(difflib.unified_diff(
        (want[0] + want[1] + str(want[2])).splitlines(),
        (got[0] + got[1] + str(got[2])).splitlines(),
        "exec'd bash", "template", lineterm=""))


@pytest.mark.parametrize("login", [False, True], ids=["bash-c", "bash-lc"])
def test_start_is_what_an_exec_of_bash_is(pair, home, login):
    """Everything bash sets at its start and everything the process is
    (test_agent_shell_template's probe), the login profile's doing
    included."""
    a, plain = pair
    args = ["-l", "-c", START_PROBE] if login else ["-c", START_PROBE]
    envs = {"HOME": home}
    got = templated(a, args, envs=envs)
    assert got[0].startswith(("profile-out\n" if login else "") +
                             "$$ is me: 1, PPID is my parent: 1, whose "
                             "parent is sandbox-agent, my group: 1, a "
                             "subshell: 1\n"), got
    same(got, run(plain, args, envs=envs))


# What the environment and the startup files make of a bash, as the text
# sees it: each with the same envs through both agents.
PROFILE_PROBE = r"""echo "$FROM_PROFILE|${FROM_BASHRC-}|${FROM_BASH_ENV-}"
type -t pf && pf a b; pa; set -o | grep -w noglob; umask; pwd; echo $PATH
shopt login_shell; echo "$0 $# $- $SHLVL $BASH_EXECUTION_STRING"
echo "${OLDPWD-unset} $PWD $_"; trap -p; exit 3"""
ENV_CASES = {
    "login_profile_and_bash_env": (["-l", "-c", PROFILE_PROBE],
                                   {"BASH_ENV": "~/env.sh"}),
    "bash_env_without_login": (["-c", PROFILE_PROBE],
                               {"BASH_ENV": "$HOME/env.sh"}),
    "positional_args": (["-l", "-c", 'echo "$0|$1|$2|$#"', "zero", "one",
                         "two"], {}),
    "exported_function": (["-c", "greet; declare -f greet"],
                          {"BASH_FUNC_greet%%": "() { echo hi from env; }"}),
    # No pipeline: the trace of its two sides comes in either order.
    "shellopts_and_bashopts": (["-c", "echo $-; shopt -p extglob; "
                                "shopt -op xtrace noglob"],
                               {"SHELLOPTS": "noglob:xtrace",
                                "BASHOPTS": "extglob", "PS4": "+[$0] "}),
    "posix_mode": (["-l", "-c", "set -o | grep posix; echo $POSIXLY_CORRECT"],
                   {"POSIXLY_CORRECT": "1"}),
    "locale_and_tz": (["-c", "locale; printf '%(%Z)T\\n' 0; "
                       "echo $'\\u00e9' | wc -c"],
                      {"LC_ALL": "C.UTF-8", "TZ": "Asia/Tokyo"}),
    "path_reset_by_the_profile": (["-l", "-c", "echo $PATH; type -P env"],
                                  {"PATH": "/nowhere"}),
    "shlvl_pwd_oldpwd_from_env": (["-c", "echo $SHLVL $PWD $OLDPWD"],
                                  {"SHLVL": "7", "PWD": "/",
                                   "OLDPWD": "/tmp"}),
    "ifs_not_imported": (["-c", "echo \"${IFS@Q}\""], {"IFS": "x"}),
    "loader_variables_take_the_plain_path": (
        ["-c", "echo ran"], {"LD_PRELOAD": "/no/such/lib.so"}),
}


@pytest.mark.parametrize("name", sorted(ENV_CASES))
def test_environment_and_startup_files(pair, home, name):
    a, plain = pair
    args, envs = ENV_CASES[name]
    envs = {"HOME": home, **envs}
    if name == "loader_variables_take_the_plain_path":
        got = run(a, args, envs=envs)
        assert TEMPLATED_RE.search(a.read_log()) is None
    else:
        got = templated(a, args, envs=envs)
    same(got, run(plain, args, envs=envs))


def test_cwd_stdin_and_exit_status(pair, box):
    a, plain = pair
    for agent in (a, plain):
        assert run(agent, ["-c", "pwd; kill -TERM $$"], cwd="/tmp") == (
            "/tmp\n", "", {"exitCode": -1, "exited": False,
                           "status": "signal: terminated",
                           "error": "signal: terminated"})
    e = Envd(a)
    s, pid = start(a, ["-l", "-c", "read x; echo got $x; cat"], stdin=True)
    assert e.call("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"stdin": b64(b"one\ntwo\n")}}) \
        == {}
    assert e.call("process.Process/CloseStdin",
                  {"process": {"pid": pid}}) == {}
    out, err, end = collect(s)
    assert (out, end["exitCode"]) == (b"got one\ntwo\n", 0), err


def test_a_command_that_cannot_start_fails_the_call(pair, box):
    """A directory the user may not enter or that does not exist: the call
    fails as an exec's would (invalid_argument, no start event), on both
    agents; the template's pairs are still there for the next call."""
    a, plain = pair
    for agent in (a, plain):
        for cwd in (box.secret, "/no/such/dir"):
            s = Envd(agent).stream("process.Process/Start", {"process": {
                "cmd": "/bin/bash", "args": ["-l", "-c", "echo ran"],
                "cwd": cwd}})
            assert s.status == 200
            events, eos = s.end()
            assert events == []
            assert eos["error"]["code"] == "invalid_argument", eos
            assert "cannot change to directory" in eos["error"]["message"]
    assert templated(a, ["-c", "echo ran"])[0] == "ran\n"


def test_start_pid_is_the_process_and_signals_reach_it(pair):
    """The pid of the first start event is the command's $$, List shows
    it, SendSignal ends it as it ends an exec'd bash; a Start with a pty
    takes the plain path, as before."""
    a, plain = pair
    for agent in (a, plain):
        e = Envd(agent)
        s, pid = start(agent, ["-l", "-c", "echo $$; exec sleep 1000"])
        flags, msg = s.next()
        assert msg["event"]["data"]["stdout"] == b64(f"{pid}\n".encode())
        assert pid in [p["pid"] for p in e.list()]
        assert e.call("process.Process/SendSignal", {
            "process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"}) == {}
        events, eos = s.end()
        assert events[-1]["event"]["end"]["status"] == "signal: terminated"
        assert eos == {}
    before = len(TEMPLATED_RE.findall(a.read_log()))
    s, pid = Envd(a).start("", process={"cmd": "/bin/bash",
                                        "args": ["-l", "-c", "tty; echo $$"]},
                           pty={"size": {"cols": 80, "rows": 24}})
    out, err, end = collect(s)
    tty, shown = out.decode().split()
    assert (tty.startswith("/dev/pts/"), shown) == (True, str(pid)), out
    assert end["exitCode"] == 0
    assert len(TEMPLATED_RE.findall(a.read_log())) == before


# Run by a command a Start made, about the bash that is its parent: the
# token (given reversed, so that it is in no text bash holds) in that
# bash's environment, command line or readable memory; its descriptors;
# and a SIGSTOP to every other process under the agent (the template, the
# waiting pairs, the keepers), each of which must be refused.
HOSTILE_PROBE = r"""
import os, signal, sys
token = sys.argv[1][::-1].encode()
bash, agent = os.getppid(), int(sys.argv[2])
found = [n for n in ("environ", "cmdline")
         if token in open(f"/proc/{bash}/{n}", "rb").read()]
with open(f"/proc/{bash}/maps") as maps, \
        open(f"/proc/{bash}/mem", "rb", 0) as mem:
    for line in maps:
        f = line.split()
        if "r" not in f[1]:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(lo)
            if token in mem.read(hi - lo):
                found.append(f[5] if len(f) > 5 else "anonymous")
        except (OSError, OverflowError):
            pass
mine = {bash, os.getpid()}
others = set()
for task in os.listdir(f"/proc/{agent}/task"):
    with open(f"/proc/{agent}/task/{task}/children") as c:
        others |= {int(p) for p in c.read().split()}
for p in list(others):
    try:
        with open(f"/proc/{p}/task/{p}/children") as c:
            others |= {int(q) for q in c.read().split()}
    except OSError:
        pass
stopped = []
for p in sorted(others - mine):
    try:
        os.kill(p, signal.SIGSTOP)
        stopped.append(p)
    except PermissionError:
        pass
    except ProcessLookupError:
        pass
print("found", found)
print("fds", sorted(int(d) for d in os.listdir(f"/proc/{bash}/fd")))
print("others", len(others - mine) > 0, "stopped", stopped)
"""


@pytest.mark.parametrize("login", [False, True], ids=["bash-c", "bash-lc"])
def test_a_started_command_reaches_nothing_of_the_agents(start_agent, box,
                                                         login):
    """The process a Start made from the root template holds no trace of
    the agent's token (environment, command line, memory), no descriptor
    but its three, and cannot stop the template, the waiting pairs or any
    keeper."""
    token = "tok-" + os.urandom(12).hex()
    a = start_agent("--run-as", RUN_AS, "--log-level", "debug", token=token)
    wait_template(a)
    r = a.post("/envd/init", {"defaultWorkdir": "/tmp"})
    assert r.status_code == 204, r.text
    script = os.path.join(tempfile.mkdtemp(prefix="envd-probe-"), "p.py")
    os.chmod(os.path.dirname(script), 0o755)
    with open(script, "w") as f:
        f.write(HOSTILE_PROBE)
    os.chmod(script, 0o644)
    # A list, not one simple command, which bash would exec in its place.
    cmd = f"python3 {script} {token[::-1]} {a.proc.pid}; exit $?"
    args = ["-l", "-c", cmd] if login else ["-c", cmd]
    out, err, end = templated(a, args)
    assert end["exitCode"] == 0, (out, err)
    assert "found []\nfds [0, 1, 2]\nothers True stopped []\n" == out, err
    # The template is still there, and serves the next call.
    assert templated(a, ["-c", "echo again"])[0] == "again\n"
    shutil.rmtree(os.path.dirname(script), ignore_errors=True)
