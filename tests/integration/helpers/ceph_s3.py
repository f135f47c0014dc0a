"""A real S3 server for the tests and the benchmark: Debian's Ceph 16 RADOS
gateway on a throwaway one-node cluster (one monitor, one memstore OSD, no
manager), every port on 127.0.0.1, its data in a temporary directory.

It checks AWS Signature V4 (a wrong secret is 403 SignatureDoesNotMatch)
and serves PUT, GET, HEAD, ranged GET, LIST v2, DELETE, DeleteObjects and
multipart uploads, as AWS S3 does. Start-up takes about 12 s and 225 MB,
so the tests that need it start one per test session.

Inside the cluster cephx is off and the messenger runs in crc mode (in
secure mode radosgw hangs at start); that is the cluster's own traffic,
on loopback. S3 clients authenticate with SigV4 as usual.

Also a small S3 client (SigV4 signed by hand, hashlib and hmac) with which
the tests look into the bucket and plant what sandboxd must refuse.

    python3 tests/integration/helpers/ceph_s3.py DIR   # start one, print its
                                               # settings, stop on SIGTERM
"""
import datetime
import hashlib
import hmac
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import pytest

ACCESS_KEY = "SBXTESTKEY0123456789"
SECRET_KEY = "sbx-test-secret-0123456789abcdefghijklmn"
REGION = "us-east-1"
S3NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CephS3:
    """One monitor, one memstore OSD and radosgw; stop() ends them by
    their pids and removes the directory."""

    def __init__(self, base=None, memstore_bytes=2 << 30):
        self.dir = tempfile.mkdtemp(prefix="sbx-ceph-", dir=base or "/tmp")
        self.procs = []
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        try:
            self._start(memstore_bytes)
        except BaseException:
            self.stop()
            raise

    def _conf(self, memstore_bytes):
        d = self.dir
        mon2, mon1 = _free_port(), _free_port()
        self.mon_addr = f"[v2:127.0.0.1:{mon2},v1:127.0.0.1:{mon1}]"
        self.fsid = str(uuid.uuid4())
        conf = f"""[global]
fsid = {self.fsid}
mon host = {self.mon_addr}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = {memstore_bytes}
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
mon cluster log file = {d}/log/cluster.log
keyring = {d}/keyring
mon data = {d}/mon.$id
osd data = {d}/osd$id
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{self.port}
rgw data = {d}/rgw
rgw thread pool size = 32
rgw dns name = 127.0.0.1
"""
        self.conf = os.path.join(d, "ceph.conf")
        with open(self.conf, "w") as f:
            f.write(conf)

    def _run(self, *args, timeout=60):
        r = subprocess.run(list(args), capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({r.returncode}): "
                               f"{r.stderr[-2000:]}")
        return r.stdout

    def _daemon(self, *args):
        out = open(os.path.join(self.dir, "log", "daemons.out"), "ab")
        p = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def _start(self, memstore_bytes):
        d = self.dir
        for sub in ("run", "log", "mon.a", "osd0", "rgw"):
            os.makedirs(os.path.join(d, sub))
        self._conf(memstore_bytes)
        c = ["-c", self.conf]
        self._run("ceph-authtool", "--create-keyring", f"{d}/keyring",
                  "--gen-key", "-n", "mon.", "--cap", "mon", "allow *")
        self._run("monmaptool", "--create", "--fsid", self.fsid, "--addv",
                  "a", self.mon_addr, f"{d}/monmap")
        self._run("ceph-mon", *c, "--mkfs", "-i", "a", "--monmap",
                  f"{d}/monmap")
        self._daemon("ceph-mon", *c, "-i", "a", "-f")
        osd_uuid = str(uuid.uuid4())
        self._run("ceph", *c, "osd", "new", osd_uuid)
        self._run("ceph-osd", *c, "-i", "0", "--mkfs", "--osd-uuid",
                  osd_uuid)
        self._daemon("ceph-osd", *c, "-i", "0", "-f")
        self.rgw = self._daemon("radosgw", *c, "-n", "client.rgw.a", "-f")
        deadline = time.time() + 120
        while True:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited: "
                                       + self.log_tail())
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                  timeout=2)
                conn.request("GET", "/")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("radosgw did not answer: "
                                   + self.log_tail())
            time.sleep(0.1)
        self._run("radosgw-admin", *c, "user", "create", "--uid=sbxtest",
                  "--display-name=sbxtest", f"--access-key={ACCESS_KEY}",
                  f"--secret={SECRET_KEY}")

    def log_tail(self, size=3000):
        path = os.path.join(self.dir, "log", "daemons.out")
        try:
            with open(path, "rb") as f:
                return f.read().decode(errors="replace")[-size:]
        except OSError:
            return ""

    def client(self, bucket, secret=None):
        return S3Client(self.endpoint, bucket, self.access_key,
                        secret or self.secret_key, self.region)

    def env(self, bucket):
        """sandboxd's settings for this server and bucket."""
        return {"FILE_SYSTEM": "oss", "OSS_ENDPOINT": self.endpoint,
                "OSS_ACCESS_KEY_ID": self.access_key,
                "OSS_ACCESS_KEY_SECRET": self.secret_key,
                "OSS_BUCKET_NAME": bucket, "OSS_REGION": self.region}

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ceph():
    """The session's S3 server, started by the first test that asks (a
    module importing this fixture) and stopped at the session's end."""
    s3 = CephS3()
    yield s3
    s3.stop()


def _quote(s, safe="-_.~"):
    return urllib.parse.quote(s, safe=safe)


class S3Client:
    """Path-style requests signed with SigV4 (payload hashed)."""

    def __init__(self, endpoint, bucket, access, secret, region):
        u = urllib.parse.urlsplit(endpoint)
        self.host, self.port = u.hostname, u.port
        self.netloc = u.netloc
        self.bucket, self.access, self.secret = bucket, access, secret
        self.region = region

    def request(self, method, key=None, query=None, body=b"", headers=None):
        path = "/" + self.bucket
        if key is not None:
            path += "/" + _quote(key, safe="-_.~/")
        q = "&".join(f"{_quote(k)}={_quote(v)}"
                     for k, v in sorted((query or {}).items()))
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        payload = hashlib.sha256(body).hexdigest()
        h = {"host": self.netloc, "x-amz-date": amz_date,
             "x-amz-content-sha256": payload}
        for k, v in (headers or {}).items():
            h[k.lower()] = v
        names = sorted(h)
        canonical = "\n".join([
            method, path, q,
            "".join(f"{n}:{h[n].strip()}\n" for n in names),
            ";".join(names), payload])
        scope = f"{amz_date[:8]}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        k = ("AWS4" + self.secret).encode()
        for part in (amz_date[:8], self.region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access}/"
                              f"{scope}, SignedHeaders={';'.join(names)}, "
                              f"Signature={sig}")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path + ("?" + q if q else ""), body=body,
                         headers=h)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def make_bucket(self):
        status, _, body = self.request("PUT")
        assert status == 200, (status, body)

    def put(self, key, data, headers=None):
        status, h, body = self.request("PUT", key, body=data,
                                       headers=headers)
        assert status == 200, (status, body)
        return h.get("ETag", "").strip('"')

    def get(self, key):
        status, _, body = self.request("GET", key)
        return status, body

    def delete(self, key):
        status, _, body = self.request("DELETE", key)
        assert status in (200, 204), (status, body)

    def list(self, prefix=""):
        """{key: (size, etag)} of every object under prefix."""
        out, token = {}, None
        while True:
            # URL-encoded keys: a control character has no place in XML.
            q = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
            if token:
                q["continuation-token"] = token
            status, _, body = self.request("GET", query=q)
            assert status == 200, (status, body)
            root = ET.fromstring(body)
            encoded = root.findtext(S3NS + "EncodingType") == "url"
            for c in root.findall(S3NS + "Contents"):
                key = c.find(S3NS + "Key").text
                if encoded:
                    key = urllib.parse.unquote_plus(key)
                out[key] = (
                    int(c.find(S3NS + "Size").text),
                    c.find(S3NS + "ETag").text.strip('"'))
            if root.findtext(S3NS + "IsTruncated") != "true":
                return out
            token = root.findtext(S3NS + "NextContinuationToken")


def main():
    s3 = CephS3(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"OSS_ENDPOINT={s3.endpoint}")
    print(f"OSS_ACCESS_KEY_ID={s3.access_key}")
    print(f"OSS_ACCESS_KEY_SECRET={s3.secret_key}")
    print(f"OSS_REGION={s3.region}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop:
        time.sleep(0.2)
    s3.stop()


if __name__ == "__main__":
    main()
