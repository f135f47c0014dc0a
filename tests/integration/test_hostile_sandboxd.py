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

from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401


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
