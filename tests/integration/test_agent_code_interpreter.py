"""The code interpreter of E2B's SDK (/ci: runCode and its contexts)
against the real agent and Debian's IPython, numpy, pandas and matplotlib,
over HTTP as @e2b/code-interpreter sends it (sandboxd maps its port 49999
to /ci)."""
import base64
import http.client
import json
import os
import textwrap
import time

import pytest

from conftest import rss_kib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JSON_HEADERS = {"Content-Type": "application/json"}


def lines_of(agent, code, **extra):
    """The answer's JSON lines, as the SDK reads them."""
    r = agent.post("/ci/execute", {"code": code, **extra}, stream=True,
                   timeout=120, headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1] == {"type": "end_of_execution"}
    return [line for line in lines[:-1] if line["type"] != "keepalive"]


class Execution:
    """What the SDK's Execution holds after runCode."""

    def __init__(self, lines):
        self.lines = lines
        self.stdout = [x["text"] for x in lines if x["type"] == "stdout"]
        self.stderr = [x["text"] for x in lines if x["type"] == "stderr"]
        self.results = [x for x in lines if x["type"] == "result"]
        errors = [x for x in lines if x["type"] == "error"]
        assert len(errors) <= 1, errors
        self.error = errors[0] if errors else None
        counts = [x["execution_count"] for x in lines
                  if x["type"] == "number_of_executions"]
        self.count = counts[0] if counts else None

    @property
    def text(self):
        return next((r.get("text") for r in self.results
                     if r["is_main_result"]), None)


def run(agent, code, **extra):
    return Execution(lines_of(agent, code, **extra))


def ok(agent, code, **extra):
    """A run that must not raise."""
    ex = run(agent, code, **extra)
    assert ex.error is None, ex.error
    return ex


def create(agent, **body):
    r = agent.post("/ci/contexts", body, timeout=120, headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    ctx = r.json()
    assert set(ctx) == {"id", "language", "cwd"}
    return ctx


def contexts(agent):
    r = agent.get("/ci/contexts", headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    return r.json()


def test_health(agent):
    r = agent.get("/ci/health")
    assert r.status_code == 200 and r.json() == "OK"


def test_value_output_and_execution_count(agent):
    ex = ok(agent, "x = 40\nprint('hello')\nx + 2")
    assert ex.stdout == ["hello\n"]
    assert ex.text == "42"
    assert ex.lines[0] == {"type": "number_of_executions",
                           "execution_count": 1}
    assert ex.stdout and "T" in ex.lines[1]["timestamp"]
    # State is kept, counts go on; a quiet cell has no result.
    ex = ok(agent, "y = x")
    assert ex.results == [] and ex.stdout == [] and ex.count == 2
    ex = ok(agent, "import sys\nprint('warn', file=sys.stderr)\ny")
    assert ex.stderr == ["warn\n"] and ex.text == "40" and ex.count == 3
    # A string's value without its quotes, as E2B's server gives it.
    assert ok(agent, "'abc'").text == "abc"


def test_error_has_name_value_and_traceback(agent):
    ex = run(agent, "def boom():\n    return 1 / 0\nprint('before')\nboom()")
    assert ex.stdout == ["before\n"]
    assert ex.error["name"] == "ZeroDivisionError"
    assert ex.error["value"] == "division by zero"
    assert "boom()" in ex.error["traceback"]
    assert "ZeroDivisionError" in ex.error["traceback"]
    assert "\x1b[" not in ex.error["traceback"]
    # The traceback is the error's, not stderr's.
    assert ex.stderr == []
    ex = run(agent, "def broken(:")
    assert ex.error["name"] == "SyntaxError"
    ex = run(agent, "raise ValueError('custom')")
    assert (ex.error["name"], ex.error["value"]) == ("ValueError", "custom")
    assert ok(agent, "print('still fine')").stdout == ["still fine\n"]


def test_output_is_streamed_while_the_cell_runs(agent, tmp_path):
    """The first line arrives while the cell still waits for the test to
    let it go: the answer is not held until the end."""
    go = tmp_path / "go"
    code = textwrap.dedent(f"""
        import os, sys, time
        print('first', flush=True)
        print('err', file=sys.stderr, flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        print('second')
    """)
    r = agent.post("/ci/execute", {"code": code}, stream=True, timeout=60)
    assert r.status_code == 200
    lines = r.iter_lines()
    seen = []
    while {"first\n", "err\n"} - {x.get("text") for x in seen}:
        seen.append(json.loads(next(lines)))
    go.write_text("")
    seen += [json.loads(x) for x in lines if x]
    assert [x.get("text") for x in seen if x["type"] == "stdout"] == [
        "first\n", "second\n"]
    assert seen[-1] == {"type": "end_of_execution"}


def test_results_in_every_format(agent):
    code = textwrap.dedent("""
        from IPython.display import (HTML, JSON, SVG, Image, Javascript,
                                     Latex, Markdown, display)
        import base64
        PNG = base64.b64decode(
            'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk'
            '+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')
        display(HTML('<b>bold</b>'))
        display(Markdown('# title'))
        display(SVG('<svg xmlns="http://www.w3.org/2000/svg"/>'))
        display(Image(PNG))
        display(Latex(r'$x^2$'))
        display(JSON({'k': [1, 2]}))
        display(Javascript('console.log(1)'))
        {'a': [1, 2.5, None]}
    """)
    ex = ok(agent, code)
    *shown, main = ex.results
    assert [r["is_main_result"] for r in shown] == [False] * 7
    assert shown[0]["html"] == "<b>bold</b>"
    assert shown[1]["markdown"] == "# title"
    assert shown[2]["svg"].startswith("<svg")
    assert base64.b64decode(shown[3]["png"]).startswith(PNG_SIGNATURE)
    assert shown[4]["latex"] == "$x^2$"
    assert shown[5]["json"] == {"k": [1, 2]}
    assert shown[6]["javascript"] == "console.log(1)"
    assert all("text" in r for r in shown)
    # The last value: its text, and lists and dicts as JSON too.
    assert main["is_main_result"] is True
    assert main["text"] == "{'a': [1, 2.5, None]}"
    assert main["json"] == {"a": [1, 2.5, None]}
    assert ex.text == main["text"]


def test_printers_registered_for_numbers_are_used(agent):
    assert ok(agent, "5").results == [{"type": "result",
                                       "is_main_result": True, "text": "5"}]
    ok(agent, "html = get_ipython().display_formatter.formatters["
           "'text/html']\nhtml.for_type(int, lambda n: f'<i>{n}</i>')\n"
           "html.for_type_by_name('builtins', 'float', lambda f: '<f/>')")
    ex = ok(agent, "5")
    assert ex.results[0]["html"] == "<i>5</i>" and ex.text == "5"
    assert ok(agent, "0.5").results[0]["html"] == "<f/>"


def test_matplotlib_figure_is_a_png_result(agent):
    ok(agent, "import matplotlib.pyplot as plt")  # may build the font cache
    ex = ok(agent, "plt.plot([1, 3, 2])\nplt.title('t')\nplt.show()")
    [fig] = ex.results
    assert fig["is_main_result"] is False
    assert base64.b64decode(fig["png"]).startswith(PNG_SIGNATURE)
    assert fig["text"].startswith("<Figure")
    # A figure left open at the end of a cell comes back too, once.
    ex = ok(agent, "fig, ax = plt.subplots()\nax.bar([1, 2], [3, 4])\n"
            "print('drawn')")
    assert ex.stdout == ["drawn\n"]
    assert [("png" in r) for r in ex.results] == [True]
    assert ok(agent, "1").results == [{"type": "result",
                                       "is_main_result": True, "text": "1"}]


def test_pandas_dataframe_gives_html_text_and_data(agent):
    ex = ok(agent, "import pandas as pd\n"
            "pd.DataFrame({'n': [1, 2], 'w': ['a', None]})")
    [df] = ex.results
    assert df["is_main_result"] is True
    assert "<table" in df["html"] and "<td>a</td>" in df["html"]
    assert df["text"].split() == ["n", "w", "0", "1", "a", "1", "2", "None"]
    assert df["data"] == {"n": [1, 2], "w": ["a", None]}
    # numpy values become plain JSON.
    ex = ok(agent, "import numpy as np\nnp.arange(3)")
    assert ex.text == "array([0, 1, 2])"
    assert ok(agent, "[np.int64(7), np.float32(0.5)]").results[0]["json"] \
        == [7, 0.5]


def test_env_vars_are_set_for_one_run(agent):
    ok(agent, "import os\nos.environ['KEPT'] = 'before'")
    ex = ok(agent, "print(os.environ['SBX_ONE'], os.environ['KEPT'])",
            env_vars={"SBX_ONE": "one", "KEPT": "during"})
    assert ex.stdout == ["one during\n"]
    ex = ok(agent, "print(os.environ.get('SBX_ONE'), os.environ['KEPT'])")
    assert ex.stdout == ["None before\n"]
    for bad in ({"A=B": "x"}, {"A": 1}, ["A"], {"": "x"}):
        r = agent.post("/ci/execute", {"code": "1", "env_vars": bad})
        assert r.status_code == 400, (bad, r.text)


def test_the_sandboxs_variables_are_in_every_run(agent):
    """What envd's /init set (E2B's envVars at create) is in the
    environment of every run, in every context; a run's env_vars win."""
    r = agent.post("/envd/init", {"envVars": {"SBX_ALL": "all",
                                               "SBX_OVER": "sandbox"}})
    assert r.status_code == 204, r.text
    ctx = create(agent)
    code = "import os\nprint(os.environ['SBX_ALL'], os.environ['SBX_OVER'])"
    assert ok(agent, code).stdout == ["all sandbox\n"]
    assert ok(agent, code, context_id=ctx["id"]).stdout == ["all sandbox\n"]
    ex = ok(agent, code, env_vars={"SBX_OVER": "run"})
    assert ex.stdout == ["all run\n"]


def test_contexts_are_isolated(agent, tmp_path):
    [default] = contexts(agent)
    assert default["language"] == "python"
    assert default["cwd"] == agent.workspace
    ok(agent, "shared = 'default'")
    a = create(agent)
    b = create(agent, language="Python", cwd=str(tmp_path))
    assert a["cwd"] == agent.workspace and b["cwd"] == str(tmp_path)
    assert a["id"] != b["id"]
    assert [c["id"] for c in contexts(agent)] == [default["id"], a["id"],
                                                  b["id"]]
    ok(agent, "shared = 'a'", context_id=a["id"])
    ex = run(agent, "shared", context_id=b["id"])
    assert ex.error["name"] == "NameError"
    assert ok(agent, "shared", context_id=a["id"]).text == "a"
    assert ok(agent, "shared").text == "default"
    # "default" and language python name the default context.
    assert ok(agent, "shared", context_id="default").text == "default"
    assert ok(agent, "shared", language="python").text == "default"
    # Each starts where it was asked to, and counts its own runs.
    ex = ok(agent, "import os\nos.getcwd()", context_id=b["id"])
    assert ex.text == str(tmp_path) and ex.count == 2


def test_restart_clears_state_and_keeps_the_context(agent, tmp_path):
    ctx = create(agent, cwd=str(tmp_path))
    ok(agent, "gone = 1\nimport os\nos.chdir('/')", context_id=ctx["id"])
    r = agent.post(f"/ci/contexts/{ctx['id']}/restart", headers=JSON_HEADERS)
    assert r.status_code == 204, r.text
    ex = run(agent, "gone", context_id=ctx["id"])
    assert ex.error["name"] == "NameError" and ex.count == 1
    ex = ok(agent, "import os\nos.getcwd()", context_id=ctx["id"])
    assert ex.text == str(tmp_path)
    assert ctx in contexts(agent)
    # The default context restarts too.
    ok(agent, "kept = 1")
    r = agent.post("/ci/contexts/default/restart")
    assert r.status_code == 204
    assert run(agent, "kept").error["name"] == "NameError"
    assert agent.post("/ci/contexts/nope/restart").status_code == 404


def test_restart_ends_a_running_cell(agent, tmp_path):
    ctx = create(agent)
    started = tmp_path / "started"
    conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=60)
    conn.request("POST", "/ci/execute", json.dumps({
        "code": f"open({str(started)!r}, 'w').close()\n"
                "import time\ntime.sleep(600)",
        "context_id": ctx["id"]}),
        {"Authorization": f"Bearer {agent.token}"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = json.loads(resp.readline())
    assert first["type"] == "number_of_executions"
    while not started.exists():
        ok(agent, "pass")   # a round trip on another context
    r = agent.post(f"/ci/contexts/{ctx['id']}/restart")
    assert r.status_code == 204
    rest = [json.loads(line) for line in resp.read().splitlines()]
    assert rest[-1] == {"type": "end_of_execution"}
    [error] = [x for x in rest if x["type"] == "error"]
    assert error["name"] == "ContextRestarting"
    assert ok(agent, "1 + 1", context_id=ctx["id"]).text == "2"


def test_remove(agent):
    ctx = create(agent)
    r = agent.delete(f"/ci/contexts/{ctx['id']}", headers=JSON_HEADERS)
    assert r.status_code == 204, r.text
    assert ctx not in contexts(agent)
    r = agent.post("/ci/execute", {"code": "1", "context_id": ctx["id"]})
    assert r.status_code == 404
    assert ctx["id"] in r.json()["detail"]
    assert agent.delete(f"/ci/contexts/{ctx['id']}").status_code == 404
    # The default context removed is made anew by the next run.
    ok(agent, "old = 1")
    [default] = contexts(agent)
    assert agent.delete(f"/ci/contexts/{default['id']}").status_code == 204
    assert contexts(agent) == []
    assert run(agent, "old").error["name"] == "NameError"
    [new] = contexts(agent)
    assert new["id"] != default["id"]


def test_other_languages_are_refused(agent):
    for lang in ("javascript", "js", "r", "bash", "java", "typescript"):
        r = agent.post("/ci/execute", {"code": "1", "language": lang})
        assert r.status_code == 400
        assert "Python only" in r.json()["detail"]
        r = agent.post("/ci/contexts", {"language": lang})
        assert r.status_code == 400
    r = agent.post("/ci/execute", {"code": "1", "language": "python",
                                   "context_id": "default"})
    assert r.status_code == 400
    r = agent.post("/ci/execute", {"code": "1", "context_id": "nope"})
    assert r.status_code == 404
    assert [c["language"] for c in contexts(agent)] == ["python"]


def test_bad_cwd_fails_the_create(agent, tmp_path):
    r = agent.post("/ci/contexts", {"cwd": str(tmp_path / "missing")})
    assert r.status_code == 400
    assert "No such file or directory" in r.json()["detail"]
    assert agent.post("/ci/contexts", {"cwd": "relative"}).status_code == 400
    assert len(contexts(agent)) == 1


def test_number_of_contexts_is_bounded(start_agent):
    a = start_agent("--max-contexts", "2")
    create(a)
    r = a.post("/ci/contexts", {})
    assert r.status_code == 429
    assert "--max-contexts" in r.json()["detail"]
    [default, ctx] = contexts(a)
    assert a.delete(f"/ci/contexts/{ctx['id']}").status_code == 204
    create(a)


def test_huge_output_is_bounded(start_agent):
    a = start_agent("--output-cap", "64K")
    ex = ok(a, "print('x' * 200000)\nimport sys\n"
            "print('tail', file=sys.stderr)\n"
            "from IPython.display import HTML, display\n"
            "for i in range(10):\n    display(HTML('h' * 10000))")
    assert "".join(ex.stdout) == "x" * 65536
    assert len(ex.results) == 6
    assert ex.stderr[0] == "tail\n"
    notes = "".join(ex.stderr[1:])
    assert "stdout truncated: 134465 bytes over the 65536-byte limit" in \
        notes
    assert "results truncated" in notes
    # The marker at the cell's end survived the cut: the next run is fine.
    assert ok(a, "'next'").text == "next"


def test_a_result_too_large_for_a_frame_is_dropped_with_a_note(agent):
    ex = ok(agent, "from IPython.display import HTML, display\n"
            "display(HTML('h' * (17 << 20)))\n"
            "[[i, i] for i in range(30000)]")
    [main] = ex.results
    assert "json" not in main and main["text"].startswith("[[0, 0],")
    assert any("result was dropped" in s for s in ex.stderr), ex.stderr
    assert any("json left out" in s for s in ex.stderr), ex.stderr


def test_client_gone_interrupts_the_cell(agent, tmp_path):
    started, caught = tmp_path / "started", tmp_path / "caught"
    ok(agent, "kept = 'yes'")
    code = textwrap.dedent(f"""
        import time
        open({str(started)!r}, 'w').close()
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            open({str(caught)!r}, 'w').close()
            raise
    """)
    conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=60)
    conn.request("POST", "/ci/execute", json.dumps({"code": code}),
                 {"Authorization": f"Bearer {agent.token}"})
    assert conn.getresponse().status == 200
    c2 = create(agent)
    while not started.exists():
        ok(agent, "pass", context_id=c2["id"])
    conn.close()
    # The next run waits for the interrupted one: its state is kept.
    assert ok(agent, "kept").text == "yes"
    assert caught.exists()


def test_kernel_death_ends_the_run_and_the_next_has_a_fresh_kernel(agent):
    ok(agent, "gone = 1")
    ex = run(agent, "import os\nprint('bye', flush=True)\nos._exit(3)")
    assert ex.stdout == ["bye\n"]
    assert ex.error["name"] == "UnexpectedEndOfExecution"
    assert "exited with status 3" in ex.error["value"]
    ex = run(agent, "gone")
    assert ex.error["name"] == "NameError"
    assert ok(agent, "6 * 7").text == "42"


def test_kernel_breaking_the_protocol_is_replaced(agent):
    """A cell can write to the kernel's channel: a result of the wrong
    shape is refused, the kernel killed, the run told why."""
    code = textwrap.dedent("""
        import json, os
        body = json.dumps({"result": {"text": 5}, "main": True}).encode()
        os.write(3, len(body).to_bytes(4, "big") + body)
        import time; time.sleep(600)
    """)
    ex = run(agent, code)
    assert ex.error["name"] == "UnexpectedEndOfExecution"
    assert "sent a result that is not" in ex.error["value"]
    assert ok(agent, "2 + 2").text == "4"


def test_keepalive_while_the_cell_is_silent(agent):
    r = agent.post("/ci/execute", {"code": "import time\ntime.sleep(6)"},
                   stream=True, timeout=60)
    types = [json.loads(line)["type"] for line in r.iter_lines() if line]
    assert "keepalive" in types
    assert types[-1] == "end_of_execution"


def test_prewarm_context_starts_the_default_kernel(start_agent):
    a = start_agent("--prewarm-context", "true")
    # The kernel is up before any run: its ready line is in the log.
    for _ in range(600):
        if "IPython kernel ready" in a.read_log():
            break
        time.sleep(0.1)
    assert "IPython kernel ready" in a.read_log()
    assert ok(a, "1 + 1").text == "2"


@pytest.mark.memory
def test_a_slow_client_does_not_grow_the_agent(start_agent):
    """The kernel is not read while the client lags: 200 MiB of output
    read slowly leave the agent's memory alone."""
    a = start_agent("--output-cap", "1G")
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
    conn.request("POST", "/ci/execute", json.dumps({
        "code": "import sys\nfor i in range(200):\n"
                "    sys.stdout.write('y' * (1 << 20) + '\\n')"}),
        {"Authorization": f"Bearer {a.token}"})
    resp = conn.getresponse()
    total = 0
    while chunk := resp.read(16384):
        total += len(chunk)
    assert total > 200 << 20
    assert rss_kib(a.proc.pid, "VmHWM") < 64 * 1024
