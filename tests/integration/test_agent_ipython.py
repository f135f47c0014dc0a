"""run_ipython_cell against the real agent and Debian's IPython."""
import base64
import concurrent.futures
import http.client
import json
import os
import signal
import stat
import time

import pytest

from conftest import SYSTEM_PYTHON, result_texts

ROUTE = "/tools/run_ipython_cell"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def cell(agent, code, **extra):
    r = agent.post(ROUTE, {"code": code, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    res = r.json()
    assert set(res) == {"meta", "content", "isError"}
    return res


def out(agent, code, **extra):
    """stdout of a cell that must not fail."""
    res = cell(agent, code, **extra)
    texts = result_texts(res)
    assert res["isError"] is False, texts
    return texts["stdout"]


def raw_post(agent, code, **extra):
    """Send a cell without waiting for the answer; getresponse() later."""
    conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=120)
    conn.request("POST", ROUTE, json.dumps({"code": code, **extra}),
                 {"Authorization": f"Bearer {agent.token}",
                  "Content-Type": "application/json"})
    return conn


def sync(agent):
    """A round trip through the agent's one event loop: a request sent
    before it on another connection has been read by then."""
    assert agent.get("/healthz", timeout=30).status_code == 200


def children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append((int(d), cmdline))
    return kids


def kernels(agent):
    """The kernel's pid: a child of the keeper the agent runs it under."""
    return [pid for keeper, _ in children(agent.proc.pid)
            for pid, cmd in children(keeper)
            if b"python" in os.path.basename(cmd[0])]


def test_state_persists_between_cells(agent):
    assert out(agent, "x = 20\nimport math") == ""
    assert out(agent, "def double(v):\n    return 2 * v") == ""
    assert out(agent, "print(double(x) + math.floor(2.5))") == "42\n"
    assert out(agent, "%env SBX_MAGIC=on") == "env: SBX_MAGIC=on\n"
    assert out(agent, "import os; print(os.environ['SBX_MAGIC'])") == "on\n"
    assert out(agent, "%%capture captured\nprint('hidden')") == ""
    assert out(agent, "print(captured.stdout.strip())") == "hidden\n"


def test_answer_shape(agent):
    res = cell(agent, "print('hello')")
    assert res == {"meta": None, "isError": False, "content": [
        {"type": "text", "text": "hello\n", "description": "stdout"}]}
    res = cell(agent, "import sys\nprint('a')\nprint('b', file=sys.stderr)")
    assert res["isError"] is True
    assert [c["description"] for c in res["content"]] == ["stdout", "stderr"]
    assert result_texts(res) == {"stdout": "a\n", "stderr": "b\n"}
    # Quiet cells still carry an (empty) stdout item.
    assert cell(agent, "y = 1")["content"] == [
        {"type": "text", "text": "", "description": "stdout"}]


def test_value_of_last_expression(agent):
    assert out(agent, "1 + 1") == "2\n"
    assert out(agent, "print('a')\n'b'") == "a\n'b'\n"
    assert out(agent, "[1, 2]\n{'k': None}") == "{'k': None}\n"
    assert out(agent, "3;") == ""
    assert out(agent, "None") == ""
    assert "Out[" not in out(agent, "list(range(3))")
    # Long values are pretty-printed over several lines, as IPython does.
    assert out(agent, "list(range(30))").startswith("[0,\n 1,\n")


def test_exception_traceback_on_stderr_and_state_kept(agent):
    out(agent, "kept = 'yes'")
    res = cell(agent, "def boom():\n    return 1 / 0\nprint('before')\nboom()")
    texts = result_texts(res)
    assert res["isError"] is True
    assert texts["stdout"] == "before\n"
    assert "Traceback" in texts["stderr"]
    assert "ZeroDivisionError: division by zero" in texts["stderr"]
    assert "\x1b[" not in texts["stderr"]
    res = cell(agent, "def broken(:")
    assert res["isError"] is True
    assert "SyntaxError" in result_texts(res)["stderr"]
    assert out(agent, "print(kept)") == "yes\n"


def test_output_of_child_processes_is_captured(agent):
    code = ("import os, subprocess\n"
            "print('py', flush=True)\n"
            "os.system('echo from-system; echo err-system >&2')\n"
            "subprocess.run(['sh', '-c', 'echo from-subprocess; "
            "echo err-subprocess >&2'])\n"
            "print('end')")
    res = cell(agent, code)
    texts = result_texts(res)
    assert texts["stdout"] == "py\nfrom-system\nfrom-subprocess\nend\n"
    assert texts["stderr"] == "err-system\nerr-subprocess\n"
    assert out(agent, "!echo bang; echo bang2") == "bang\nbang2\n"
    assert out(agent, "files = !ls /\n'usr' in files") == "True\n"
    log = agent.read_log()
    assert "from-system" not in log and "err-subprocess" not in log


def test_matplotlib_figure_comes_back_as_png(agent):
    cell(agent, "import matplotlib.pyplot as plt")  # may build the font cache
    res = cell(agent, "plt.plot([1, 3, 2])\nplt.title('t')\nplt.show()")
    images = [c for c in res["content"] if c["type"] == "image"]
    assert res["isError"] is False, result_texts(res)
    assert len(images) == 1 and images[0]["mimeType"] == "image/png"
    assert base64.b64decode(images[0]["data"]).startswith(PNG_SIGNATURE)
    assert res["content"][0] == {"type": "text", "text": "",
                                 "description": "stdout"}
    # A figure left at the end of a cell, with no show(), comes back too.
    res = cell(agent, "fig, ax = plt.subplots()\nax.bar([1, 2], [3, 4])\n"
               "print('drawn')")
    images = [c for c in res["content"] if c["type"] == "image"]
    assert result_texts(res)["stdout"] == "drawn\n"
    assert len(images) == 1
    assert base64.b64decode(images[0]["data"]).startswith(PNG_SIGNATURE)
    # Shown figures are closed: the next cell brings no picture.
    assert [c["type"] for c in cell(agent, "1")["content"]] == ["text"]


def test_timeout_interrupts_and_keeps_state(agent):
    out(agent, "before = 'still here'")
    res = cell(agent, "while True:\n    pass", timeout=1)
    texts = result_texts(res)
    assert res["isError"] is True
    assert "KeyboardInterrupt" in texts["stderr"]
    assert "timeout" in texts["stderr"] and "interrupted" in texts["stderr"]
    assert "kept its state" in texts["stderr"]
    assert out(agent, "print(before)") == "still here\n"


def test_cell_ignoring_interrupt_gets_kernel_restarted(agent):
    out(agent, "lost = 1")
    pid = kernels(agent)
    code = ("import time\n"
            "while True:\n"
            "    try:\n"
            "        time.sleep(100)\n"
            "    except KeyboardInterrupt:\n"
            "        print('caught', flush=True)\n")
    res = cell(agent, code, timeout=0.5)
    texts = result_texts(res)
    assert res["isError"] is True
    assert "killed and restarted" in texts["stderr"]
    assert "state" in texts["stderr"] and "lost" in texts["stderr"]
    assert texts["stdout"] == "caught\n"
    res = cell(agent, "lost")
    assert "NameError" in result_texts(res)["stderr"]
    assert out(agent, "2 * 21") == "42\n"
    assert kernels(agent) != pid


def test_kernel_death_is_reported_and_next_call_gets_fresh_kernel(agent):
    out(agent, "gone = 1")
    res = cell(agent, "import os\nprint('bye', flush=True)\nos._exit(1)")
    texts = result_texts(res)
    assert res["isError"] is True
    assert texts["stdout"] == "bye\n"
    assert "died" not in texts["stdout"]
    assert "exited with status 1" in texts["stderr"]
    assert "fresh kernel" in texts["stderr"]
    res = cell(agent, "gone")
    assert "NameError" in result_texts(res)["stderr"]
    assert out(agent, "1 + 2") == "3\n"


def test_kernel_death_between_cells_is_told_to_the_next_cell(agent):
    out(agent, "idle_state = 1")
    [pid] = kernels(agent)
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 30  # a guard against hanging, not a timing test
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{pid}"), "the agent did not reap it"
    # Whether the agent saw the death before this call came or only while
    # sending it, the call says the state is gone.
    res = cell(agent, "print('after')")
    stderr = result_texts(res)["stderr"]
    assert res["isError"] is True
    assert "signal 9" in stderr and "fresh kernel" in stderr
    res = cell(agent, "idle_state")
    assert "NameError" in result_texts(res)["stderr"]
    assert out(agent, "'told once'") == "'told once'\n"


def test_segfault_is_reported(agent):
    res = cell(agent, "import ctypes\nctypes.string_at(0)")
    assert res["isError"] is True
    assert "signal 11" in result_texts(res)["stderr"]
    assert out(agent, "'ok'") == "'ok'\n"


def test_cells_run_one_at_a_time_in_arrival_order(agent):
    out(agent, "import os, time\norder = []")
    gate = raw_post(agent, "while not os.path.exists('go'):\n"
                           "    time.sleep(0.01)\norder.append('gate')")
    sync(agent)
    conns = []
    for i in range(5):
        conns.append(raw_post(agent, f"order.append({i})\nprint(len(order))"))
        sync(agent)
    # The shell is not blocked by the running cell; it opens the gate.
    agent.shell("touch go")
    assert gate.getresponse().status == 200
    outs = []
    for c in conns:
        r = c.getresponse()
        assert r.status == 200
        outs.append(result_texts(json.loads(r.read()))["stdout"])
    assert outs == ["2\n", "3\n", "4\n", "5\n", "6\n"]
    assert out(agent, "order") == "['gate', 0, 1, 2, 3, 4]\n"


def test_concurrent_cells_do_not_interleave(agent):
    out(agent, "log = []")
    code = "log.append('start')\nlog.append('end')"
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda _: cell(agent, code), range(5)))
    assert all(r["isError"] is False for r in results)
    assert out(agent, "print(log)") == str(["start", "end"] * 5) + "\n"


def test_health_and_shell_answer_while_a_cell_runs(agent):
    out(agent, "import os, time")
    running = raw_post(agent, "while not os.path.exists('release'):\n"
                              "    time.sleep(0.01)\nprint('released')")
    sync(agent)
    assert agent.get("/healthz", timeout=30).text == "OK"
    res = agent.shell("echo shell-ok; touch release")
    assert result_texts(res)["stdout"] == "shell-ok\n"
    r = running.getresponse()
    assert r.status == 200
    assert result_texts(json.loads(r.read()))["stdout"] == "released\n"


def test_client_leaving_a_queued_cell_drops_it(agent):
    out(agent, "import os, time\nseen = []")
    gate = raw_post(agent, "while not os.path.exists('open'):\n"
                           "    time.sleep(0.01)\nseen.append('gate')")
    sync(agent)
    dropped = raw_post(agent, "seen.append('dropped')")
    sync(agent)
    dropped.close()
    sync(agent)
    kept = raw_post(agent, "seen.append('kept')")
    sync(agent)
    agent.shell("touch open")
    assert gate.getresponse().status == 200
    assert kept.getresponse().status == 200
    assert out(agent, "seen") == "['gate', 'kept']\n"


def test_client_leaving_a_running_cell_interrupts_it(agent):
    out(agent, "survivor = 5")
    spin = raw_post(agent, "while True:\n    pass", timeout=600)
    sync(agent)
    spin.close()
    # Were the spinning cell not interrupted, this would wait 600 s.
    assert out(agent, "survivor * 2") == "10\n"


def test_restart_for_a_client_that_left_is_told_to_the_next_cell(agent):
    out(agent, "mine = 1")
    armed = os.path.join(agent.workspace, "armed")
    stubborn = raw_post(agent, "import time\n"
                               "while True:\n"
                               "    try:\n"
                               f"        open({armed!r}, 'w').close()\n"
                               "        time.sleep(100)\n"
                               "    except KeyboardInterrupt:\n"
                               "        pass", timeout=600)
    # Leave only once the cell shrugs interrupts off: one that landed
    # before its try would simply end it, and nothing need restart.
    deadline = time.time() + 60
    while not os.path.exists(armed):
        assert time.time() < deadline, "the cell did not start"
        time.sleep(0.01)
    stubborn.close()
    res = cell(agent, "print('next')\n'mine' in globals()")
    texts = result_texts(res)
    assert texts["stdout"] == "next\nFalse\n"
    assert "client had left" in texts["stderr"]
    assert "fresh kernel" in texts["stderr"]
    assert out(agent, "'quiet again'") == "'quiet again'\n"


def test_prewarm_starts_the_kernel_with_the_agent(start_agent):
    cold = start_agent()
    assert kernels(cold) == []
    warm = start_agent("--prewarm-kernel")
    pids = kernels(warm)
    assert len(pids) == 1
    assert out(warm, "import os\nos.getpid()") == f"{pids[0]}\n"
    out(cold, "1")
    assert len(kernels(cold)) == 1


def test_kernel_is_confined_like_commands(agent):
    code = ("import os\n"
            "print(os.getcwd())\n"
            "print(os.getpgid(0) == os.getpid())\n"
            "print('SECRET_TOKEN' in os.environ)\n"
            "print([l.split()[1] for l in open('/proc/self/status') "
            "if l.startswith('Seccomp:')][0])\n"
            "def target(fd):\n"
            "    try:\n"
            "        return os.readlink(f'/proc/self/fd/{fd}')\n"
            "    except OSError:\n"
            "        return ''\n"
            "print([fd for fd in os.listdir('/proc/self/fd') "
            "if target(fd).startswith('socket:')])")
    lines = out(agent, code).splitlines()
    assert os.path.realpath(lines[0]) == os.path.realpath(agent.workspace)
    assert lines[1:4] == ["True", "False", "2"]
    # The kernel holds its channel to the agent and no other socket; the
    # commands it runs get only stdio (ls's own directory is 3).
    assert lines[4] == "['3']"
    assert out(agent, "!ls /proc/self/fd") == "0\n1\n2\n3\n"


def test_kernel_command_line_is_short(agent):
    # Every command in the sandbox sees the kernel in ps: its command line
    # names it in a line, the script itself is not there.
    assert out(agent, "x = 6 * 7\nx") == "42\n"
    [pid] = kernels(agent)
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = f.read().rstrip(b"\0").split(b"\0")
    assert args[1:3] == [b"-u", b"-c"] and len(args) == 4
    assert b"sandbox-agent-kernel" in args[3] and len(args[3]) < 100
    ps = agent.shell(f"ps -o args= -p {pid}")
    assert "sandbox-agent-kernel" in result_texts(ps)["stdout"]
    assert len(result_texts(ps)["stdout"]) < 150
    # The script's descriptor is closed once read: nothing inherits it.
    assert out(agent, "import os\n[os.readlink(f'/proc/self/fd/{fd}') "
               "for fd in os.listdir('/proc/self/fd')"
               " if os.path.exists(f'/proc/self/fd/{fd}')"
               " and 'memfd' in os.readlink(f'/proc/self/fd/{fd}')]") == "[]\n"
    assert out(agent, "x") == "42\n"


def test_workspace_module_does_not_shadow_the_kernel(start_agent,
                                                      tmp_workspace):
    with open(os.path.join(tmp_workspace, "json.py"), "w") as f:
        f.write("raise SystemExit('shadowed')\n")
    with open(os.path.join(tmp_workspace, "helper.py"), "w") as f:
        f.write("VALUE = 'from workspace'\n")
    a = start_agent()
    assert out(a, "import helper\nprint(helper.VALUE)") == "from workspace\n"


def test_output_cap_and_large_output(start_agent):
    a = start_agent("--output-cap", "64K")
    res = cell(a, "print('x' * 200000)\nimport sys\nprint('tail', file=sys.stderr)")
    texts = result_texts(res)
    assert texts["stdout"].startswith("x" * 65536)
    assert "truncated" in texts["stdout"]
    assert texts["stderr"] == "tail\n"
    # The kernel's end-of-cell mark survived the cut: the next cell is fine.
    assert out(a, "'next'") == "'next'\n"
    b = start_agent()
    text = out(b, "import os\nos.system('head -c 5000000 /dev/zero | tr "
                  "\"\\\\0\" y')\nprint()")
    assert text == "y" * 5000000 + "\n"


def test_non_utf8_output_is_replaced(agent):
    assert out(agent, "import os\nos.write(1, b'a\\xffb\\n');") == \
        "a\ufffdb\n"


def test_bad_input(agent):
    cases = [
        b"{", b"[]", b'"x"', b"{}", b'{"code": 5}', b'{"code": null}',
        b'{"code": ""}', b'{"code": "  \\n "}',
        b'{"code": "1", "timeout": "x"}', b'{"code": "1", "timeout": -1}',
        b'{"code": "1", "timeout": 0}',
    ]
    for body in cases:
        r = agent.post(ROUTE, data=body,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert isinstance(r.json()["detail"], str)
    assert agent.post("/fastapi" + ROUTE, {"code": "1"}).status_code == 200


def test_missing_python_answers_503_and_agent_keeps_serving(start_agent):
    a = start_agent(env={"AGENT_PYTHON": "/nonexistent/python3"})
    r = a.post(ROUTE, {"code": "1"})
    assert r.status_code == 503
    assert "/nonexistent/python3" in r.json()["detail"]
    assert a.get("/healthz").text == "OK"
    assert result_texts(a.shell("echo fine"))["stdout"] == "fine\n"


def test_missing_ipython_answers_503_with_reason(start_agent, tmp_path):
    # Without site, Debian's python3 sees no dist-packages: no IPython.
    wrapper = tmp_path / "python-without-ipython"
    wrapper.write_text(f"#!/bin/sh\nexec {SYSTEM_PYTHON} -S \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    a = start_agent(env={"AGENT_PYTHON": str(wrapper)})
    for _ in range(2):
        r = a.post(ROUTE, {"code": "1"})
        assert r.status_code == 503
        assert "IPython" in r.json()["detail"]
    assert a.get("/healthz").text == "OK"


@pytest.mark.parametrize("prefix", ["", "/fastapi"])
def test_needs_token(agent, prefix):
    import requests
    r = requests.post(agent.url + prefix + ROUTE, json={"code": "1"})
    assert r.status_code == 403
