"""Shutdown with AUTO_CLEANUP: every sandbox goes, removals run wide
(SANDBOXD_SHUTDOWN_PARALLEL), the log counts them ("removed N of M"), and
the exit status says whether all went: 1, with a line naming how many are
left, when Docker refuses some."""
import os
import re
import signal
import socket
import threading
import time

import requests

from sandboxd_fixtures import (BACKEND, docker_only, minimal_tag,  # noqa: F401
                               scratch, start_sandboxd, wait_until)

N = 20
ONE_AT_A_TIME = "containers are stopped and removed one at a time"


def test_sigterm_removes_a_full_pool_and_counts(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": str(N), "SANDBOXD_POOL_PARALLEL": "8",
                            "SANDBOXD_CREATE_TIMEOUT": "300"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == N,
               180, what=f"{N} warm sandboxes")
    assert len(s.containers()) == N
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    assert s.containers() == {}
    assert os.listdir(os.path.join(s.state_dir, "workspaces")) == []
    log = s.read_log()
    m = re.search(rf"shutdown: removing {N} sandboxes, (\d+) at once", log)
    assert m, log[-3000:]
    # 32 at once, but one at a time on a Docker that deadlocks when two
    # containers exit together (Debian 12's 20.10.24 among them); crun:
    # as many as its calls at once (SANDBOXD_CRUN_PARALLEL: twice the
    # CPUs).
    if BACKEND == "crun":
        assert int(m.group(1)) == 2 * os.cpu_count()
    else:
        assert int(m.group(1)) == (1 if ONE_AT_A_TIME in log else 32)
    assert re.search(rf"shutdown: removed {N} of {N} sandboxes in [0-9.]+ s",
                     log), log[-3000:]
    assert f"shutdown: removed all {N} sandboxes" in log
    print(re.search(r"shutdown: removed all .*", log).group(0))
    assert "could not be removed" not in log


class RefusingDocker:
    """A unix socket in front of the real Docker daemon that answers every
    container removal with Docker's own error shape and status 500 (or,
    with hang=True, never answers it, as a Docker too busy to get to it),
    and passes every other request through. sandboxd's client sends one
    request per connection (Connection: close), so the first line says
    all."""

    def __init__(self, path, hang=False, refuse=True):
        self.path = path
        self.hang = hang
        self.refuse = refuse
        # Removals passed through (refuse=False): how many at once.
        self.lock = threading.Lock()
        self.deleting = 0
        self.most_deleting = 0
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        self.upstream = host[len("unix://"):]
        self.refused = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,),
                             daemon=True).start()

    def handle(self, conn):
        first = b""
        while b"\r\n" not in first:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            first += chunk
        deleting = first.startswith(b"DELETE /containers/")
        if deleting and self.refuse:
            self.refused += 1
            if self.hang:
                # Until sandboxd gives up and closes.
                while conn.recv(65536):
                    pass
                conn.close()
                return
            body = b'{"message":"removal refused (test)"}'
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n"
                         % len(body) + body)
            conn.close()
            return
        if deleting:
            with self.lock:
                self.deleting += 1
                self.most_deleting = max(self.most_deleting, self.deleting)
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(self.upstream)
        up.sendall(first)

        answered = []

        def answer_came():
            # Docker has done the removal once it answers: counted
            # before the answer is passed on, so sandboxd's next call
            # cannot look like an overlap.
            if deleting and not answered:
                answered.append(1)
                with self.lock:
                    self.deleting -= 1

        def pump(a, b, upstream):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    if upstream:
                        answer_came()
                    b.sendall(data)
            except OSError:
                pass
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=pump, args=(up, conn, True), daemon=True)
        t.start()
        pump(conn, up, False)
        t.join(30)
        up.close()
        conn.close()
        answer_came()

    def close(self):
        self.sock.close()


@docker_only
def test_exit_status_says_some_are_left(start_sandboxd, scratch):
    sock = os.path.join(scratch("sbxd-dk-"), "docker.sock")
    proxy = RefusingDocker(sock)
    try:
        s = start_sandboxd(env={"DOCKER_HOST": f"unix://{sock}",
                                "POOL_SIZE": "3"})
        wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}']
                   == 3, 120, what="3 warm sandboxes")
        s.signal(signal.SIGTERM)
        assert s.wait_exit() == 1
        log = s.read_log()
        assert ("shutdown: 3 containers could not be removed and are left "
                "running, labelled for the next start") in log, log[-3000:]
        assert proxy.refused >= 6          # each release, then the sweep
        left = s.containers()
        assert len(left) == 3
        for name in left:
            labels = s.inspect(name)["Config"]["Labels"]
            assert labels["io.agentscope.sandboxd.instance"] == s.instance
    finally:
        proxy.close()
    s.expected_exit = 1


@docker_only
def test_shutdown_timeout_exits_leaving_the_rest_labelled(start_sandboxd,
                                                          scratch):
    """SANDBOXD_SHUTDOWN_TIMEOUT bounds the whole shutdown: removals Docker
    has not answered by then are given up, with no last sweep that would
    wait on Docker again; the exit status is 1 and what is left keeps its
    label and its record for the next start, which removes it."""
    sock = os.path.join(scratch("sbxd-dk-"), "docker.sock")
    proxy = RefusingDocker(sock, hang=True)
    try:
        s = start_sandboxd(env={"DOCKER_HOST": f"unix://{sock}",
                                "POOL_SIZE": "3",
                                "SANDBOXD_SHUTDOWN_PARALLEL": "8",
                                "SANDBOXD_SHUTDOWN_TIMEOUT": "2"})
        wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}']
                   == 3, 120, what="3 warm sandboxes")
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        assert s.wait_exit() == 1
        took = time.monotonic() - t0
        assert took < 10, took
        log = s.read_log()
        assert ("shutdown: Docker has finished no removal in 1 s; the "
                "daemon may be stuck") in log, log[-3000:]
        assert ("shutdown: 3 operations still running after 2 s "
                "(SANDBOXD_SHUTDOWN_TIMEOUT); exiting anyway") in log, \
            log[-3000:]
        assert ("shutdown: 3 containers could not be removed and are left "
                "running, labelled for the next start") in log, log[-3000:]
        assert proxy.refused == 3          # no sweep after the timeout
        left = s.containers()
        assert len(left) == 3
    finally:
        proxy.close()
    s.expected_exit = 1
    # The next start with this state directory, on the real Docker, takes
    # them back (AUTO_CLEANUP: as pool sandboxes) or removes them; its own
    # shutdown then removes every one.
    s2 = start_sandboxd(state_dir=s.state_dir,
                        env={"POOL_SIZE": "3"})
    wait_until(lambda: s2.metrics()['sandboxd_pool_ready{type="minimal"}']
               == 3, 120, what="3 warm sandboxes after the restart")
    s2.signal(signal.SIGTERM)
    assert s2.wait_exit() == 0
    assert s.containers() == {} and s2.containers() == {}


@docker_only
def test_removals_one_at_a_time_but_at_shutdown(start_sandboxd, scratch):
    """On a Docker before 20.10.27 (Debian 12 has 20.10.24) stops and
    removes go to it one at a time (SANDBOXD_REMOVE_PARALLEL auto): its
    libnetwork deadlocks when two containers' network teardowns overlap
    (moby/moby#46661) and then answers nothing more. A set
    SANDBOXD_SHUTDOWN_PARALLEL is taken as asked at shutdown."""
    sock = os.path.join(scratch("sbxd-dk-"), "docker.sock")
    proxy = RefusingDocker(sock, refuse=False)
    try:
        s = start_sandboxd(env={"DOCKER_HOST": f"unix://{sock}",
                                "POOL_SIZE": "0",
                                "SANDBOXD_SHUTDOWN_PARALLEL": "3"})
        names = [s.create() for _ in range(4)]
        errors = []

        def release(name):
            try:
                r = requests.post(s.url + "/release",
                                  json={"identity": name}, timeout=120,
                                  headers=dict(s.session.headers))
                assert r.status_code == 200, r.text
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=release, args=(n,))
                   for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        wait_until(lambda: s.containers() == {}, 120,
                   what="the 4 released containers gone")
        if ONE_AT_A_TIME in s.read_log():
            assert proxy.most_deleting == 1
        else:
            assert proxy.most_deleting > 1

        for _ in range(6):
            s.create()
        proxy.most_deleting = 0
        s.signal(signal.SIGTERM)
        assert s.wait_exit() == 0
        assert s.containers() == {}
        assert 2 <= proxy.most_deleting <= 3, proxy.most_deleting
        assert "shutdown: removing 6 sandboxes, 3 at once" in s.read_log()
    finally:
        proxy.close()
