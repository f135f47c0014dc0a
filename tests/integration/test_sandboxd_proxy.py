"""The proxy streams bodies both ways with backpressure: large uploads and
large answers pass through sandboxd without being held in its memory.
Memory is checked by sandboxd's peak RSS (VmHWM) before and after."""
import hashlib
import io
import os
import time

import pytest
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


@pytest.mark.memory
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


@pytest.mark.memory
def test_one_gib_up_and_down_through_the_proxy(sandboxd):
    """The issue's figure: 1 GiB through /proxy/{id}/workspace/file both
    ways grows sandboxd's peak memory by a few MiB at most."""
    s = sandboxd
    name = s.create()
    mount = s.rpc("get_info", identity=name)["mount_dir"]
    block = 1024 * 1024
    nblocks = 1024
    seed = os.urandom(block)
    up_hash = hashlib.sha256()

    def body():
        for i in range(nblocks):
            chunk = i.to_bytes(8, "little") + seed[8:]
            up_hash.update(chunk)
            yield chunk

    url = f"/proxy/{name}/workspace/file"
    # Warm every path up first, so the baseline includes it.
    assert s.session.put(s.url + url, params={"path": "warm.bin"},
                         data=seed).status_code == 200
    assert s.get(url, params={"path": "warm.bin", "format": "bytes"}
                 ).content == seed
    base = _hwm(s)
    r = s.session.put(s.url + url, params={"path": "big/huge.bin"},
                      data=body(), timeout=900)
    assert r.status_code == 200, r.text
    assert r.json()["size"] == block * nblocks
    after_up = _hwm(s)
    assert os.path.getsize(os.path.join(mount, "big/huge.bin")) == \
        block * nblocks
    down_hash = hashlib.sha256()
    got = 0
    with s.get(url, params={"path": "big/huge.bin", "format": "bytes"},
               stream=True, timeout=900) as r:
        assert r.status_code == 200
        assert r.headers["Content-Length"] == str(block * nblocks)
        for chunk in r.iter_content(block):
            down_hash.update(chunk)
            got += len(chunk)
    after_down = _hwm(s)
    assert got == block * nblocks
    assert down_hash.hexdigest() == up_hash.hexdigest()
    print(f"sandboxd VmHWM: {base} KiB, after 1 GiB up {after_up} KiB, "
          f"after 1 GiB down {after_down} KiB")
    assert after_up - base < GROWTH_LIMIT_KIB
    assert after_down - base < GROWTH_LIMIT_KIB


def _hwm(s):
    from conftest import rss_kib
    return rss_kib(s.proc.pid, "VmHWM")


@pytest.mark.memory
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
