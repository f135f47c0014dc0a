"""The proxy streams bodies both ways with backpressure: large uploads and
large answers pass through sandboxd without being held in its memory.
Memory is checked by sandboxd's peak RSS (VmHWM) before and after."""
import io
import time

import requests

from sandboxd_fixtures import minimal_tag, sandboxd, start_sandboxd  # noqa: F401

MiB = 1024 * 1024
# What sandboxd may grow by while streaming: its socket buffers (about a
# megabyte each way) and the allocator's slack, never the body.
GROWTH_LIMIT_KIB = 8 * 1024


def json_body_chunks(total, command):
    head = b'{"command": "%s", "pad": "' % command.encode()
    yield head
    sent = len(head)
    piece = b"x" * (256 * 1024)
    while sent + len(piece) < total:
        yield piece
        sent += len(piece)
    yield b'"}'


def test_large_upload_streams_through(sandboxd):
    s = sandboxd
    name = s.create()
    hwm = _hwm(s)
    # 30 MiB (the agent's JSON limit is 32 MiB), chunked from a generator.
    r = s.post(f"/proxy/{name}/tools/run_shell_command",
               data=json_body_chunks(30 * MiB, "echo big"),
               headers={"Content-Type": "application/json"}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "big\n"
    # The same with a Content-Length.
    body = b"".join(json_body_chunks(30 * MiB, "echo sized"))
    r = s.post(f"/proxy/{name}/tools/run_shell_command",
               data=io.BytesIO(body),
               headers={"Content-Type": "application/json",
                        "Content-Length": str(len(body))}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "sized\n"
    grew = _hwm(s) - hwm
    assert grew < GROWTH_LIMIT_KIB, f"sandboxd grew by {grew} KiB"
    # Too large for the agent: its 413 comes back as it said it.
    r = s.post(f"/proxy/{name}/tools/run_shell_command",
               data=json_body_chunks(40 * MiB, "true"), timeout=300)
    assert r.status_code == 413


def _hwm(s):
    from conftest import rss_kib
    return rss_kib(s.proc.pid, "VmHWM")


def test_large_answer_to_a_slow_reader(sandboxd):
    s = sandboxd
    name = s.create()
    cmd = "head -c 15000000 /dev/zero | tr '\\0' a"
    hwm = _hwm(s)
    for path, body in ((f"/proxy/{name}/tools/run_shell_command",
                        {"command": cmd}),
                       ("/call_tool", {"identity": name,
                                       "tool_name": "run_shell_command",
                                       "arguments": {"command": cmd}})):
        r = requests.post(s.url + path, json=body, stream=True, timeout=300)
        assert r.status_code == 200
        got = 0
        for chunk in r.iter_content(64 * 1024):
            got += len(chunk)
            if got < 4 * MiB:
                time.sleep(0.01)	# a slow start: sandboxd must wait
        assert got > 15000000
    grew = _hwm(s) - hwm
    assert grew < GROWTH_LIMIT_KIB, f"sandboxd grew by {grew} KiB"
    # The relayed answer is whole: {"data": <the agent's answer>}.
    out = s.rpc("call_tool", identity=name, tool_name="run_shell_command",
                arguments={"command": cmd})
    assert out["content"][0]["text"] == "a" * 15000000


def test_client_leaving_midway_cancels(sandboxd):
    s = sandboxd
    name = s.create()
    r = requests.post(f"{s.url}/proxy/{name}/tools/run_shell_command",
                      json={"command": "head -c 15000000 /dev/zero | tr '\\0' b"},
                      stream=True, timeout=300)
    next(r.iter_content(1024))
    r.close()
    # sandboxd is fine and the sandbox still answers.
    assert s.shell(name, "echo after")["stdout"] == "after\n"
    assert s.metrics()["sandboxd_connections"] >= 1
