"""Hostile input, process class: what a command, the IPython kernel or an
MCP server running in the sandbox does against the agent. Each test
reproduces a finding of the review (issue 10) against the real agent and
fails on the agent before its fix.

The tests run as root, as the agent does in a container; with no --run-as
the commands are root too (root mode), which is what the token tests
attack. Docker drops CAP_SYS_PTRACE from containers: setpriv does the same
for the agent here, so both cases are covered.
"""
import json
import os
import signal
import socket
import textwrap
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts, rss_kib

TOKEN = "test-token"
NO_PTRACE = ("setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace",
             "--")


def wait_for(predicate, timeout=30, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not met within {timeout} s")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:     # gone before the open, or before the read
        return False


@pytest.fixture
def reap_escapees():
    """Pids a test expects to be killed; any still alive at the end (the
    agent before the fix) are killed here, not left on the machine."""
    pids = []
    yield pids
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def python_command(code, *args):
    """A shell command running code with Debian's python3."""
    quoted = " ".join("'%s'" % str(a) for a in args)
    return "%s -c '%s' %s" % (SYSTEM_PYTHON, code.replace("'", "'\\''"), quoted)


# --- The token: /proc/<agent>/environ, /proc/<agent>/mem, pidfd_getfd ----

PROBE = textwrap.dedent("""
    import ctypes, json, os, sys
    pid, token = int(sys.argv[1]), sys.argv[2].encode()
    found = {}
    try:
        found["environ"] = token in open(f"/proc/{pid}/environ", "rb").read()
    except OSError as e:
        found["environ"] = e.strerror
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        found["mem"] = "opened"
    except OSError as e:
        found["mem"] = e.strerror
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    fd = libc.syscall(438, pidfd, 2, 0)  # pidfd_getfd: the agent's stderr
    found["pidfd_getfd"] = "took a descriptor" if fd >= 0 else \\
        os.strerror(ctypes.get_errno())
    print(json.dumps(found))
""")


@pytest.mark.parametrize("wrapper,args", [
    ((), ()),
    # As in a container without CAP_SYS_PTRACE, and without seccomp:
    # the agent being undumpable is what stops them.
    (NO_PTRACE, ("--seccomp=off",)),
], ids=["root-full-caps", "root-no-ptrace-cap-seccomp-off"])
def test_root_command_cannot_reach_the_token(start_agent, wrapper, args):
    agent = start_agent(*args, wrapper=wrapper)
    res = agent.shell(python_command(PROBE, agent.proc.pid, TOKEN))
    found = json.loads(result_texts(res)["stdout"])
    assert found == {"environ": False, "mem": "Permission denied",
                     "pidfd_getfd": "Operation not permitted"}, res


def test_run_as_command_cannot_reach_the_token(start_agent):
    agent = start_agent("--run-as", "65534:65534")
    res = agent.shell(python_command(PROBE, agent.proc.pid, TOKEN))
    found = json.loads(result_texts(res)["stdout"])
    assert found == {"environ": "Permission denied",
                     "mem": "Permission denied",
                     "pidfd_getfd": "Operation not permitted"}, res


def test_healthcheck_still_reads_the_undumpable_agent(agent):
    """The images' HEALTHCHECK is a separate process asking the agent."""
    import subprocess
    from conftest import AGENT_BIN
    p = subprocess.run([AGENT_BIN, "--healthcheck", "--listen",
                        f"127.0.0.1:{agent.port}"],
                       env=dict(os.environ, SECRET_TOKEN=TOKEN),
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr


# --- Commands too long for argv ------------------------------------------

@pytest.mark.parametrize("mib", [1, 4])
def test_command_of_several_mib_runs(agent, mib):
    lines = ["n=0"] + ["n=$((n + 1))"] * (mib * 1024 * 1024 // 12) + ["echo $n"]
    command = "\n".join(lines)
    assert len(command) > mib * 1024 * 1024
    res = agent.shell(command)
    assert result_texts(res) == {"stdout": "%d\n" % (len(lines) - 2),
                                 "returncode": "0"}


# The tail that makes a command too long for argv: a comment line, which
# changes nothing bash -c does (line numbers included).
PADDING = "\n#" + "x" * (200 * 1024)


@pytest.mark.parametrize("command", [
    "echo $0 $#; echo $LINENO\necho $LINENO",
    "echo a; exit 7; echo b",
    "set -e; false; echo not reached",
    "trap 'echo trapped $?' EXIT; echo body; false",
    "echo a\nif then\necho b",
    "sleep 0.2 & echo started; wait $!; echo waited $?",
    "cat; echo cat=$?; readlink /proc/self/fd/0",
    "ls /proc/self/fd",
    "return 3; echo after",
])
def test_long_command_behaves_as_bash_c(agent, command):
    """Through the memfd as through argv: the same output and status.
    Messages name eval where bash -c says -c (see shell.c)."""
    short = result_texts(agent.shell(command))
    long_ = result_texts(agent.shell(command + PADDING))
    if "stderr" in long_:
        long_["stderr"] = long_["stderr"].replace(": eval: ", ": -c: ")
    assert long_ == short


def test_long_command_background_job_outlives_it(agent, reap_escapees):
    res = agent.shell("sleep 30.417 & echo $!" + PADDING)
    pid = int(result_texts(res)["stdout"])
    reap_escapees.append(pid)
    assert result_texts(res)["returncode"] == "0"
    assert alive(pid)


# --- Process trees that left the group ----------------------------------

def daemon_command(marker, duration):
    """A double-forked daemon in a session of its own: out of reach of a
    kill of the command's process group."""
    return (f"(setsid sh -c 'echo $$ >> {marker}; exec sleep {duration}' &); "
            f"setsid sh -c 'echo $$ >> {marker}; exec sleep {duration}' & "
            f"sleep {duration}")


def pids_in(marker, count):
    def ready():
        try:
            with open(marker) as f:
                pids = [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return None
        return pids if len(pids) >= count else None
    return wait_for(ready, what="the daemons' pids")


def test_daemons_are_killed_at_timeout(agent, tmp_workspace, reap_escapees):
    marker = os.path.join(tmp_workspace, "daemons")
    res = agent.shell(daemon_command(marker, 61.731), timeout=2)
    assert result_texts(res)["returncode"] == "-9"
    pids = pids_in(marker, 2)
    reap_escapees.extend(pids)
    wait_for(lambda: not any(alive(p) for p in pids), timeout=10,
             what="daemons gone after the timeout")


def raw_post(port, body):
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /tools/run_shell_command HTTP/1.1\r\nHost: x\r\n"
              b"Authorization: Bearer " + TOKEN.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


@pytest.mark.parametrize("stream", [True, False])
def test_daemons_are_killed_when_the_client_leaves(agent, tmp_workspace,
                                                   reap_escapees, stream):
    marker = os.path.join(tmp_workspace, "daemons")
    s = raw_post(agent.port, {"command": daemon_command(marker, 62.113),
                              "stream": stream})
    pids = pids_in(marker, 2)
    reap_escapees.extend(pids)
    assert all(alive(p) for p in pids)
    s.close()
    wait_for(lambda: not any(alive(p) for p in pids), timeout=10,
             what="daemons gone after the client left")


# --- seccomp -------------------------------------------------------------

SYSCALLS = textwrap.dedent("""
    import ctypes, errno, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def call(nr, *args):
        r = libc.syscall(nr, *[ctypes.c_ulong(a) for a in args])
        return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
    params = ctypes.create_string_buffer(120)
    pidfd = os.pidfd_open(os.getpid())
    print(json.dumps({
        "io_uring_setup": call(425, 4, ctypes.addressof(params)),
        "io_uring_enter": call(426, 0, 0, 0, 0, 0),
        "io_uring_register": call(427, 0, 0, 0, 0),
        "pidfd_getfd": call(438, pidfd, 1, 0),
        "kcmp": call(312, os.getpid(), os.getpid(), 0, 1, 2),
        "personality(PER_BSD)": call(135, 0x0006),
        "personality(ADDR_NO_RANDOMIZE)": call(135, 0x0040000),
        "personality(READ_IMPLIES_EXEC)": call(135, 0x0400000),
        "personality(query)": call(135, 0xffffffff),
        "personality(PER_LINUX)": call(135, 0),
    }))
""")


def test_seccomp_denies_io_uring_pidfd_getfd_kcmp_personalities(agent):
    res = agent.shell(python_command(SYSCALLS))
    assert json.loads(result_texts(res)["stdout"]) == {
        "io_uring_setup": "ENOSYS", "io_uring_enter": "ENOSYS",
        "io_uring_register": "ENOSYS", "pidfd_getfd": "EPERM",
        "kcmp": "EPERM", "personality(PER_BSD)": "EPERM",
        "personality(ADDR_NO_RANDOMIZE)": "EPERM",
        "personality(READ_IMPLIES_EXEC)": "EPERM",
        "personality(query)": "ok", "personality(PER_LINUX)": "ok",
    }, res


# --- MCP stdio server flooding the log -----------------------------------

FLOODER = textwrap.dedent("""
    # Answers initialize and tools/list, and meanwhile floods: short
    # non-JSON lines on stdout, 100 kB lines on stderr, for 3 seconds.
    import json, os, sys, threading, time

    def flood():
        junk = b"this is not JSON\\n" * 200
        long_line = b"e" * 100000 + b"\\n"
        os.write(2, long_line)
        time.sleep(0.5)
        end = time.time() + 3
        while time.time() < end:
            os.write(1, junk)
            os.write(2, long_line)

    def send(msg):
        os.write(1, (json.dumps(msg) + "\\n").encode())

    threading.Thread(target=flood, daemon=True).start()
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("method") == "initialize":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": "2025-03-26", "capabilities": {"tools": {}},
                "serverInfo": {"name": "flooder", "version": "1"}}})
        elif msg.get("method") == "tools/list":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": []}})
        elif "id" in msg:
            send({"jsonrpc": "2.0", "id": msg["id"],
                  "error": {"code": -32601, "message": "no"}})
""")


def test_mcp_server_flooding_the_log(agent, tmp_path):
    script = tmp_path / "flooder.py"
    script.write_text(FLOODER)
    before = os.path.getsize(agent.log_path)
    r = agent.post("/mcp/add_servers", {"server_configs": {"mcpServers": {
        "flooder": {"command": SYSTEM_PYTHON, "args": [str(script)]}}}})
    assert r.status_code == 200, r.text
    # Its 3 seconds of flood, and a margin.
    time.sleep(4)
    assert agent.get("/healthz").status_code == 200
    log = agent.read_log()
    grown = os.path.getsize(agent.log_path) - before
    # 50 lines per 10 s, a stderr line cut at 2 KiB: some 100 kB at most;
    # before, megabytes a second.
    assert grown < 256 * 1024, grown
    assert "MCP server 'flooder' wrote a line that is not JSON" in log
    assert "[line cut]" in log


# --- The IPython kernel's control channel --------------------------------

CELL = "/tools/run_ipython_cell"


def cell(agent, code):
    r = agent.post(CELL, {"code": code}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


FAKE_HUGE_FRAME = textwrap.dedent("""
    import os
    os.write(3, (200 << 20).to_bytes(4, "big"))
    chunk = b"x" * (1 << 20)
    for _ in range(200):
        os.write(3, chunk)
""")

FAKE_VALUES_FRAME = textwrap.dedent("""
    import os
    body = b'{"images": [], "pad": [' + b'1,' * (7 << 20) + b'1]}'
    os.write(3, len(body).to_bytes(4, "big") + body)
""")


def test_kernel_fake_frames_are_refused(agent):
    """A frame over the size limit is refused by its header; one of too
    many values while it is read. Either breaks the protocol: the cell
    says so, the kernel is replaced."""
    assert result_texts(cell(agent, "x = 1"))["stdout"] == ""
    for code, words in [(FAKE_HUGE_FRAME, "over 16 MiB"),
                        (FAKE_VALUES_FRAME, "over 65536 JSON values")]:
        res = cell(agent, code)
        assert res["isError"] is True
        assert words in result_texts(res)["stderr"], res
        assert result_texts(cell(agent, "6 * 7"))["stdout"] == "42\n"


@pytest.mark.memory
def test_kernel_fake_frames_cost_no_memory(agent):
    """Before, a 200 MiB fake frame took the agent to 680 MB, one of 7
    million small values to 300 MB: PID 1, where the OOM killer ends the
    whole sandbox."""
    for code in (FAKE_HUGE_FRAME, FAKE_VALUES_FRAME):
        cell(agent, code)
    assert rss_kib(agent.proc.pid, "VmHWM") < 64 * 1024


def test_kernel_sends_at_most_64_images(agent):
    res = cell(agent, textwrap.dedent("""
        import struct, zlib
        from IPython.display import Image, display
        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data)))
        def png(i):
            pixel = zlib.compress(bytes([0, i, 255 - i, 0]))
            return (b"\\x89PNG\\r\\n\\x1a\\n" +
                    chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
                    + chunk(b"IDAT", pixel) + chunk(b"IEND", b""))
        for i in range(70):
            display(Image(data=png(i), format="png"))
    """))
    images = [c for c in res["content"] if c["type"] == "image"]
    assert len(images) == 64
    assert "[6 image(s) dropped" in result_texts(res)["stderr"]
    assert result_texts(cell(agent, "6 * 7"))["stdout"] == "42\n"


# --- Streamed output and a slow reader -----------------------------------

def test_streamed_output_reaches_a_slow_reader(agent):
    """A background job fills the stream (the agent pauses the command
    while the client does not read); the command writes to stderr and
    exits meanwhile. Before, the grace for background jobs ran out while
    paused and its pipes were closed unread: all 50,000 bytes lost, exit 0,
    no note."""
    command = ("(head -c 8000000 /dev/zero | tr '\\0' a) & sleep 1; "
               "head -c 50000 /dev/zero | tr '\\0' b >&2")
    body = json.dumps({"command": command, "stream": True}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", agent.port))
    s.sendall(b"POST /tools/run_shell_command HTTP/1.1\r\nHost: x\r\n"
              b"Authorization: Bearer " + TOKEN.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(3)           # a client that does not read for a while
    data = b""
    s.settimeout(60)
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = s.recv(65536)
        assert chunk, "connection closed before the end of the stream"
        data += chunk
    s.close()
    rest = data.partition(b"\r\n\r\n")[2]
    payload = b""
    while True:
        size, _, rest = rest.partition(b"\r\n")
        if int(size, 16) == 0:
            break
        payload += rest[:int(size, 16)]
        rest = rest[int(size, 16) + 2:]
    events = [json.loads(line) for line in payload.splitlines() if line]
    stderr = "".join(e["data"] for e in events if e["type"] == "stderr")
    assert stderr == "b" * 50000
    assert events[-1] == {"type": "end", "returncode": 0, "timed_out": False}
