"""A TCP relay a test puts between sandboxd and the S3 server, on
127.0.0.1: it counts the requests that pass (method and path), can slow
them down, and can play the server going away mid-transfer (every
connection cut once so many body bytes went by either way, and no
connection taken until it comes back). Bytes pass unchanged, so SigV4
signatures (made for the relay's host:port) hold."""
import socket
import threading
import time


class S3Relay:
    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.lock = threading.Lock()
        self.requests = []          # (method, path)
        self.conns = []
        self.cut_after = None       # body bytes (both ways) before the cut
        self.moved = 0
        self.delay = 0.0            # seconds per 64 KiB
        self.listener = None
        self.port = None
        self.open()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def open(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port or 0))
        s.listen(64)
        self.port = s.getsockname()[1]
        self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def gone(self):
        """The server goes away: connections cut, none taken."""
        with self.lock:
            listener, self.listener = self.listener, None
            conns, self.conns = self.conns, []
        if listener is not None:
            # Wakes the accepting thread, which holds the port until then.
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for c in conns:
            for s in c:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def back(self):
        self.cut_after = None
        self.moved = 0
        if self.listener is None:
            self.open()

    def count(self, method=None):
        with self.lock:
            return sum(1 for m, _ in self.requests
                       if method is None or m == method)

    def reset(self):
        with self.lock:
            self.requests = []

    def _accept(self, listener):
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.upstream)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns.append((c, u))
            threading.Thread(target=self._up, args=(c, u), daemon=True).start()
            threading.Thread(target=self._down, args=(u, c),
                             daemon=True).start()

    def _moved(self, n):
        with self.lock:
            self.moved += n
            cut = self.cut_after is not None and self.moved >= self.cut_after
        if cut:
            self.gone()
        if self.delay:
            time.sleep(self.delay * n / 65536)
        return not cut

    def _up(self, c, u):
        """Client to server: heads parsed (for the counts), bodies by
        their Content-Length."""
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                with self.lock:
                    self.requests.append((method, path))
                u.sendall(head + b"\r\n\r\n")
                while length > 0:
                    if not buf:
                        buf = c.recv(65536)
                        if not buf:
                            return
                    part, buf = buf[:length], buf[length:]
                    length -= len(part)
                    u.sendall(part)
                    if not self._moved(len(part)):
                        return
        except OSError:
            return
        finally:
            self._close(c, u)

    def _down(self, u, c):
        try:
            while data := u.recv(65536):
                c.sendall(data)
                if not self._moved(len(data)):
                    return
        except OSError:
            return
        finally:
            self._close(c, u)

    def _close(self, c, u):
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.gone()
