"""sandboxd against a hostile agent. The agent is less trusted than
sandboxd: code in the sandbox may have taken it over. Here a small server
on the sandbox's agent socket stands in for such an agent (the real agent
cannot be made to send these answers): sandboxd must answer its client
cleanly and stay up (under the ASan/UBSan build too, where an overflow
aborts it).
"""
import os
import socket
import threading

import pytest

from sandboxd_fixtures import (minimal_tag, scratch, start_sandboxd,  # noqa: F401
                               write_types)


class FakeAgent:
    """Listens where sandboxd reaches a sandbox's agent and answers every
    request with answer(request_line) (bytes), then closes."""

    def __init__(self, path, answer):
        self.path = path
        self.answer = answer
        self.requests = []
        # The real agent's listening socket goes; ours takes its name.
        os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.decode(errors="replace").split("\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                self.requests.append(lines[0])
                try:
                    conn.sendall(self.answer(lines[0]))
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def sock_path(s, name):
    """The host side of a sandbox's agent socket (STATE_DIR/run/<id>)."""
    sandbox_id = name[len("sandboxd-"):]
    return os.path.join(s.state_dir, "run", sandbox_id, "agent.sock")


def lying_length(length):
    def answer(request_line):
        if request_line.startswith("GET /healthz"):
            return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 2\r\n\r\nOK")
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + length.encode() + b"\r\n\r\n{}")
    return answer


# INT64_MAX: sandboxd adds the 9 bytes of {"data": } around the answer;
# 1e19: beyond int64, still a length the HTTP parser takes.
@pytest.mark.parametrize("length", ["9223372036854775807",
                                    "10000000000000000000"])
def test_an_agent_announcing_an_absurd_length(start_sandboxd, length):
    s = start_sandboxd()
    name = s.create()
    agent = FakeAgent(sock_path(s, name), lying_length(length))
    try:
        r = s.post("/call_tool", {"identity": name,
                                  "tool_name": "run_shell_command",
                                  "arguments": {"command": "true"}})
        assert r.status_code == 502, r.text
        detail = r.json()["detail"]
        assert detail.startswith("Error in call_tool: the agent of " + name)
        assert "announced an answer of " + length + " bytes" in detail
        # The proxy passes an agent's answer on with its length: not one
        # beyond what HTTP lengths hold here.
        if int(length) > 2**63 - 1:
            r = s.post(f"/proxy/{name}/tools/run_shell_command",
                       {"command": "true"})
            assert r.status_code == 502, r.text
            assert "announced an answer of " + length in r.json()["detail"]
        assert any(line.startswith("POST /tools/run_shell_command")
                   for line in agent.requests)
        # sandboxd is still there, and still serves.
        assert s.get("/health").status_code == 200
        assert s.rpc("get_info", identity=name)["container_name"] == name
    finally:
        agent.close()


def test_an_agent_socket_replaced_by_a_symlink_is_not_followed(
        start_sandboxd, scratch):
    """Root in a root-mode sandbox can write its agent's socket directory
    (STATE_DIR/run/<id> on the host, bound into the sandbox). A symlink it
    puts in place of agent.sock, naming a socket of the host (Docker's,
    say), must not be followed: sandboxd would speak to that socket as
    root, with whatever a client of /proxy/{id} sends."""
    d = scratch("sbxd-link-")
    types = write_types(d, {"rootbox": {"from": "minimal", "run_as": None}})
    s = start_sandboxd(args=["--types", types])
    name = s.create("rootbox")
    host_sock = os.path.join(d, "host.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(host_sock)
    listener.listen(4)
    listener.settimeout(0.5)
    try:
        out = s.shell(name, "id -u && ln -s " + host_sock +
                      " /run/sandbox-agent/next && mv -f "
                      "/run/sandbox-agent/next /run/sandbox-agent/agent.sock"
                      " && echo replaced")
        assert out.get("stdout", "").split() == ["0", "replaced"], out
        assert os.path.islink(sock_path(s, name))
        r = s.post(f"/proxy/{name}/healthz", {})
        assert r.status_code == 502, r.text
        r = s.post("/call_tool", {"identity": name,
                                  "tool_name": "run_shell_command",
                                  "arguments": {"command": "true"}})
        assert r.status_code in (200, 502), r.text
        with pytest.raises(socket.timeout):
            conn, _ = listener.accept()
            conn.close()
        assert s.get("/health").status_code == 200
    finally:
        listener.close()
