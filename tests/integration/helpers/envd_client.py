"""A client of the agent's envd (/envd/...) speaking Connect with the JSON
codec as E2B's SDKs do: unary calls (application/json) and server streams
(application/connect+json, one enveloped message in, envelopes out),
read as they arrive. The user goes in E2b-Authorization, where sandboxd
puts the SDK's "Authorization: Basic" header."""
import base64
import json
import struct

import requests

END = 0x02


def envelope(msg, flags=0):
    data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def b64(data):
    return base64.b64encode(data).decode()


def unb64(text):
    return base64.b64decode(text)


def basic(user):
    return "Basic " + base64.b64encode(f"{user}:".encode()).decode()


class Stream:
    """The envelopes of a streamed answer, as they come: next() gives
    (flags, message); end() reads up to the end-of-stream envelope."""

    def __init__(self, response):
        self.response = response
        self.status = response.status_code
        self.content_type = response.headers.get("Content-Type")
        self._chunks = response.raw.stream(65536, decode_content=False)
        self._buf = b""
        self.ended = None

    def next(self):
        while True:
            if len(self._buf) >= 5:
                flags, n = struct.unpack(">BI", self._buf[:5])
                if len(self._buf) >= 5 + n:
                    msg = json.loads(self._buf[5:5 + n])
                    self._buf = self._buf[5 + n:]
                    if flags & END:
                        self.ended = msg
                    return flags, msg
            chunk = next(self._chunks, None)
            if chunk is None:
                raise EOFError("the stream ended without its end-of-stream "
                               "envelope")
            self._buf += chunk

    def events(self):
        """Messages up to the end of the stream (then in self.ended)."""
        while self.ended is None:
            flags, msg = self.next()
            if not flags & END:
                yield msg

    def end(self):
        out = list(self.events())
        return out, self.ended

    def close(self):
        self.response.close()


class Envd:
    def __init__(self, agent):
        self.agent = agent
        self.url = agent.url + "/envd"

    def headers(self, user=None, extra=None):
        h = {"Authorization": f"Bearer {self.agent.token}",
             "Connect-Protocol-Version": "1"}
        if user is not None:
            h["E2b-Authorization"] = basic(user)
        h.update(extra or {})
        return h

    def unary(self, method, body=None, user=None, headers=None):
        """(status, message or Connect error)."""
        h = self.headers(user, {"Content-Type": "application/json",
                                **(headers or {})})
        r = requests.post(f"{self.url}/{method}", headers=h, timeout=60,
                          data=json.dumps(body or {}))
        return r.status_code, r.json()

    def call(self, method, body=None, user=None):
        """A unary call that must succeed: its answer."""
        status, msg = self.unary(method, body, user)
        assert status == 200, (status, msg)
        return msg

    def stream(self, method, body, user=None, headers=None, raw=None):
        h = self.headers(user, {"Content-Type": "application/connect+json",
                                **(headers or {})})
        r = requests.post(f"{self.url}/{method}", headers=h, stream=True,
                          timeout=60, data=raw if raw is not None
                          else envelope(body))
        return Stream(r)

    def start(self, cmd, user=None, headers=None, **fields):
        """Start bash -c cmd (or a given process); the open stream and
        the pid of its start event."""
        process = fields.pop("process", None) or {
            "cmd": "/bin/bash", "args": ["-c", cmd]}
        s = self.stream("process.Process/Start", {"process": process,
                                                   **fields}, user, headers)
        assert s.status == 200, s.response.text
        flags, first = s.next()
        assert "start" in first["event"], first
        return s, first["event"]["start"]["pid"]

    def run(self, cmd, user=None, **fields):
        """Start and wait: (stdout bytes, stderr bytes, end event)."""
        s, _ = self.start(cmd, user, **fields)
        return collect(s)

    def list(self):
        return self.call("process.Process/List")["processes"]


def collect(stream):
    """(stdout, stderr, end) of a process stream read to its end; the
    end-of-stream must carry no error."""
    out, err, end = bytearray(), bytearray(), None
    events, eos = stream.end()
    for ev in events:
        ev = ev["event"]
        if "data" in ev:
            out += unb64(ev["data"].get("stdout", "")) + \
                unb64(ev["data"].get("pty", ""))
            err += unb64(ev["data"].get("stderr", ""))
        elif "end" in ev:
            end = ev["end"]
    assert eos == {}, eos
    return bytes(out), bytes(err), end
