"""Egress policy of sandboxes with a network, against the real sandboxd,
dockerd (or crun), nftables and the base image's Python, in a network world of the
test's own (egress_world.py): nothing leaves this machine, even when a
policy is broken.

A sandbox under the default policy reaches "the internet" (TEST-NET
addresses in the test's router namespace) and is refused, at once (a
reset, never a silent drop), a private service, the metadata service,
the gateway, another sandbox, the host's own addresses and any name
server but its own; lists set at create and changed live open and close
addresses and names; an allowed name that resolves into a private range
stays refused; root in a root-mode sandbox cannot flush the rules; and
nothing is left behind. E2B's SDK sets and changes the same lists
(allowOut, denyOut, allowInternetAccess).
"""
import base64
import hashlib
import json
import os
import subprocess
import sys
import threading

import pytest

from egress_world import (METADATA, PRIVATE, PUBLIC, PUBLIC2, ROUTER_DNS,
                          World)
from sandboxd_fixtures import (BUILD_IMAGE, base_tag, minimal_tag,  # noqa
                               start_sandboxd, scratch, wait_until,
                               write_types)
from test_sandboxd_e2b import KEY, err, ok, run

# Run inside a sandbox: each argument HOST:PORT (a name or an address) is
# connected to over TCP and sent an HTTP GET, or dns:ADDR asked for a name
# over UDP; one word each: "open <answer>", "refused", "timeout",
# "noname" (the name did not resolve), "error <errno>".
PROBE = r'''
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    kind, _, rest = target.partition(":")
    try:
        if kind == "dns":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(8)
            s.connect((rest, 53))
            s.send(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                   b"\x06public\x04test\x00\x00\x01\x00\x01")
            s.recv(512)
            out[target] = "open"
            continue
        addr = socket.getaddrinfo(kind, int(rest), socket.AF_INET,
                                  socket.SOCK_STREAM)[0][4]
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(8)
        s.connect(addr)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            piece = s.recv(4096)
            if not piece:
                break
            data += piece
        out[target] = "open " + data.decode().split("\r\n\r\n", 1)[-1].strip()
    except socket.gaierror:
        out[target] = "noname"
    except ConnectionRefusedError:
        out[target] = "refused"
    except socket.timeout:
        out[target] = "timeout"
    except OSError as e:
        out[target] = "error %d" % e.errno
print(json.dumps(out))
'''

# Run inside a sandbox: ask nftables over netlink to delete the policy's
# table; prints the kernel's answer (0, or minus an errno).
FLUSH = r'''
import socket, struct
def msg(kind, flags, seq, payload, family=0, res_id=0):
    body = struct.pack("=BBH", family, 0, res_id) + payload
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body
name = b"sandboxd\0"
attr = struct.pack("=HH", 4 + len(name), 1) + name
attr += b"\0" * (-len(attr) % 4)
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.send(msg(16, 1, 1, b"", res_id=socket.htons(10))
       + msg((10 << 8) | 2, 1 | 4, 2, attr, family=1)
       + msg(17, 1, 3, b"", res_id=socket.htons(10)))
answer = s.recv(65536)
print(struct.unpack("=i", answer[16:20])[0] if answer[4:6] == b"\x02\x00"
      else "no error message")
'''


# Run inside a sandbox: one keep-alive connection to ADDR:80, one GET
# answered (then /tmp/first holds what came of it), then, once /tmp/go
# exists, another GET on the same connection; prints what came of each.
KEEP = r'''
import os, socket, sys, time
s = socket.create_connection((sys.argv[1], 80), timeout=20)
req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
def get():
    try:
        s.sendall(req)
        data = b""
        # The head and the body may come apart.
        while b"here" not in data:
            piece = s.recv(4096)
            if not piece:
                return "empty"
            data += piece
        return "open"
    except OSError as e:
        return "error %d" % e.errno
first = get()
open("/tmp/first", "w").write(first)
while not os.path.exists("/tmp/go"):
    time.sleep(0.05)
print(first, get())
'''


# Run inside a sandbox: each argument NAME:QTYPE asked of the sandbox's
# resolver, or raw:HEX sent to it as it is; for each what came back: the
# rcode, the truncated bit, the number of answers and their longest TTL,
# or "timeout".
ASK = r'''
import json, socket, struct, sys
def ask(packet, wait):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(wait)
    s.connect(("127.0.0.53", 53))
    s.send(packet)
    try:
        data = s.recv(4096)
    except socket.timeout:
        return "timeout"
    flags, qd, an = struct.unpack(">HHH", data[2:8])
    i = 12
    for _ in range(qd):
        while data[i]:
            i += 1 + data[i]
        i += 5
    ttls = []
    for _ in range(an):
        if data[i] & 0xc0:
            i += 2
        else:
            while data[i]:
                i += 1 + data[i]
            i += 1
        ttl, size = struct.unpack(">IH", data[i + 4:i + 10])
        ttls.append(ttl)
        i += 10 + size
    return {"rcode": flags & 15, "tc": bool(flags & 0x200), "answers": an,
            "ttl": max(ttls, default=None)}
out = {}
for arg in sys.argv[1:]:
    kind, _, rest = arg.partition(":")
    if kind == "raw":
        out[arg] = ask(bytes.fromhex(rest), 3)
        continue
    q = b"".join(bytes([len(x)]) + x.encode() for x in kind.split("."))
    out[arg] = ask(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                   + q + b"\x00" + struct.pack(">HH", int(rest), 1), 8)
print(json.dumps(out))
'''


def run_py(sb, name, script, *args):
    code = base64.b64encode(script.encode()).decode()
    path = f"/tmp/{hashlib.sha256(code.encode()).hexdigest()[:12]}.py"
    out = sb.shell(name, f"echo {code} | base64 -d > {path} && "
                   f"python3 {path} {' '.join(args)}")
    return out.get("stdout", "").strip()


def probe(sb, name, *targets):
    text = run_py(sb, name, PROBE, *targets)
    try:
        return json.loads(text)
    except ValueError:
        raise AssertionError(f"probe said: {text!r}")


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w
    w.close()


TYPES = {
    "netbox": {"from": "base", "network": "bridge"},
    "rootnet": {"from": "base", "network": "bridge", "run_as": None},
}


@pytest.fixture
def egressd(start_sandboxd, base_tag, world, scratch):
    s = start_sandboxd(tag=base_tag, env=world.sandboxd_env(), args=[
        "--types", write_types(scratch(), TYPES)])
    return s


def create(sb, sandbox_type="netbox", **body):
    r = sb.post("/v1/sandboxes", {"type": sandbox_type, **body})
    assert r.status_code == 201, r.text
    return r.json()


def address(sb, world, name):
    """The sandbox's address on the test's network: it must be there, or
    its packets could take Docker's bridge and the host's uplink."""
    if sb.backend == "crun":
        ip = sb.crun_saved(name)["net"]["ip"]
        assert ip.rsplit(".", 1)[0] == world.gateway.rsplit(".", 1)[0], ip
        return ip
    nets = sb.inspect(name)["NetworkSettings"]["Networks"]
    assert list(nets) == [world.network], nets
    return nets[world.network]["IPAddress"]


def host_addresses():
    """The host's own IPv4 addresses outside the ranges every sandbox is
    denied anyway (those prove the host's own are refused as such)."""
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True,
                         text=True, check=True).stdout
    found = []
    for link in json.loads(out):
        for a in link.get("addr_info", []):
            ip = a["local"]
            first, second = (int(x) for x in ip.split(".")[:2])
            private = (first in (0, 10, 127) or first >= 224
                       or (first, second) == (169, 254)
                       or (first == 172 and 16 <= second < 32)
                       or (first, second) == (192, 168)
                       or (first == 100 and 64 <= second < 128))
            if not private:
                found.append(ip)
    return found


def test_default_policy_reaches_the_internet_and_nothing_else(egressd,
                                                              world):
    a = create(egressd)
    b = create(egressd)
    address(egressd, world, a["container_name"])
    other = address(egressd, world, b["container_name"])
    assert a["network"]["internet"] is True
    assert "10.0.0.0/8" in a["network"]["denied_by_default"]
    assert a["network"]["resolver"] == "127.0.0.53"
    targets = [f"{PUBLIC}:80", f"{PUBLIC2}:80", "public.test:80",
               f"{PRIVATE}:80", f"{METADATA}:80", f"{world.gateway}:80",
               f"{other}:8000", "private.test:80", "metadata.test:80",
               f"dns:{ROUTER_DNS}", f"dns:{world.gateway}"]
    targets += [f"{h}:80" for h in host_addresses()]
    got = probe(egressd, a["container_name"], *targets)
    assert got[f"{PUBLIC}:80"] == f"open here {PUBLIC}"
    assert got[f"{PUBLIC2}:80"] == f"open here {PUBLIC2}"
    assert got["public.test:80"] == f"open here {PUBLIC}"
    refused = {t: v for t, v in got.items() if not t.startswith(
        (PUBLIC, PUBLIC2, "public.test", "dns:"))}
    assert set(refused.values()) == {"refused"}, got
    # Name servers but its own: refused at once too (ICMP, not a drop).
    for t in (f"dns:{ROUTER_DNS}", f"dns:{world.gateway}"):
        assert got[t].startswith(("refused", "error")), got


@pytest.fixture(scope="module")
def browser_tag(base_tag):
    """The browser image of this tree's agent, under the same tag."""
    subprocess.run([BUILD_IMAGE, "--tag", base_tag, "browser"], check=True,
                   timeout=1800)
    return base_tag


def browser_tool(sb, name, tool, arguments):
    r = sb.post("/call_tool", {"identity": name, "tool_name": tool,
                               "arguments": arguments}, timeout=180)
    assert r.status_code == 200, r.text
    return "\n".join(c.get("text", "") for c in r.json()["data"]["content"])


def navigate(sb, name, url):
    """The page's text at url, or what the browser tool said of it."""
    said = browser_tool(sb, name, "browser_navigate", {"url": url})
    if "ERR_" in said:
        return said
    return browser_tool(sb, name, "browser_evaluate",
                        {"function": "() => document.body.innerText"})


def test_a_browser_sandbox_reaches_the_internet_and_nothing_else(
        start_sandboxd, browser_tag, world):
    s = start_sandboxd(tag=browser_tag, env=world.sandboxd_env())
    r = s.post("/v1/sandboxes", {"type": "browser"})
    assert r.status_code == 201, r.text
    name = r.json()["container_name"]
    address(s, world, name)
    assert f"here {PUBLIC}" in navigate(s, name, f"http://{PUBLIC}/")
    assert f"here {PUBLIC}" in navigate(s, name, "http://public.test/")
    for url in (f"http://{PRIVATE}/", f"http://{METADATA}/",
                f"http://{world.gateway}/", "http://private.test/"):
        said = navigate(s, name, url)
        assert "net::ERR_CONNECTION_REFUSED" in said, (url, said)


def test_denials_are_counted_and_nothing_is_left(egressd, world):
    box = create(egressd)["container_name"]
    got = probe(egressd, box, f"{PRIVATE}:80", "nosuch.test:80")
    assert got == {f"{PRIVATE}:80": "refused", "nosuch.test:80": "noname"}
    key = f'sandboxd_egress_denied_packets_total{{sandbox="{box}"}}'
    wait_until(lambda: egressd.metrics().get(key, 0) >= 1, timeout=30,
               what="the denial in /metrics", logs=[egressd])

    def netns_fds():
        """Namespaces sandboxd holds open but its own."""
        own = os.readlink(f"/proc/{egressd.proc.pid}/ns/net")
        fd_dir = f"/proc/{egressd.proc.pid}/fd"
        links = []
        for f in os.listdir(fd_dir):
            try:
                links.append(os.readlink(os.path.join(fd_dir, f)))
            except FileNotFoundError:
                pass    # closed since the listing
        return [n for n in links if n.startswith("net:") and n != own]

    assert netns_fds(), "sandboxd holds no namespace of the sandbox"
    r = egressd.delete(f"/v1/sandboxes/{box}")
    assert r.status_code == 200, r.text
    assert netns_fds() == []
    assert key not in egressd.metrics()
    assert egressd.stop() == 0
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True,
                            text=True, check=True).stdout
    assert "sandboxd" not in tables


def test_lists_at_create_open_ranges_and_names(egressd, world):
    # A listed CIDR opens a private range on purpose.
    mirror = create(egressd, network={"allow_out": ["10.99.0.0/16"]})
    assert mirror["network"]["allow_out"] == ["10.99.0.0/16"]
    got = probe(egressd, mirror["container_name"], f"{PRIVATE}:80",
                f"{PUBLIC}:80", f"{METADATA}:80")
    assert got == {f"{PRIVATE}:80": f"open here {PRIVATE}",
                   f"{PUBLIC}:80": f"open here {PUBLIC}",
                   f"{METADATA}:80": "refused"}

    # Without the internet: the lists alone, an allow list winning over a
    # deny list; an unlisted name is not even asked upstream (its query
    # could carry data out).
    closed = create(egressd, network={
        "internet": False, "allow_out": ["allowed.test"],
        "deny_out": ["203.0.113.0/24"]})["container_name"]
    got = probe(egressd, closed, "allowed.test:80", f"{PUBLIC}:80",
                "secret-data.public.test:80")
    assert got == {"allowed.test:80": f"open here {PUBLIC2}",
                   f"{PUBLIC}:80": "refused",
                   "secret-data.public.test:80": "noname"}
    assert "secret-data.public.test" not in world.asked()

    # E2B's way of saying the same: deny everything, allow some.
    e2b = create(egressd, network={"deny_out": ["0.0.0.0/0"],
                                   "allow_out": [PUBLIC2]})["container_name"]
    got = probe(egressd, e2b, f"{PUBLIC2}:80", f"{PUBLIC}:80",
                f"{PRIVATE}:80")
    assert got == {f"{PUBLIC2}:80": f"open here {PUBLIC2}",
                   f"{PUBLIC}:80": "refused", f"{PRIVATE}:80": "refused"}

    names = create(egressd, network={
        "internet": False, "allow_out": ["allowed.test", "*.rebind.test",
                                          "rebind.test", "private.test"]})
    box = names["container_name"]
    got = probe(egressd, box, "allowed.test:80", f"{PUBLIC2}:80",
                "private.test:80", f"{PUBLIC}:80")
    assert got == {"allowed.test:80": f"open here {PUBLIC2}",
                   f"{PUBLIC2}:80": f"open here {PUBLIC2}",
                   "private.test:80": "refused",
                   f"{PUBLIC}:80": "refused"}
    # rebind.test answers a public address first, then a private one: the
    # second stays refused though the name is allowed.
    got = probe(egressd, box, "rebind.test:80")
    assert got == {"rebind.test:80": f"open here {PUBLIC}"}
    got = probe(egressd, box, "rebind.test:80")
    assert got == {"rebind.test:80": "refused"}


def test_a_live_change_takes_effect(egressd, world):
    box = create(egressd)["container_name"]
    assert probe(egressd, box, f"{PUBLIC}:80")[f"{PUBLIC}:80"].startswith(
        "open")
    kept = []
    keeper = threading.Thread(target=lambda: kept.append(
        run_py(egressd, box, KEEP, PUBLIC)))
    keeper.start()
    wait_until(lambda: egressd.shell(box, "cat /tmp/first 2>/dev/null").get(
        "stdout"), what="the kept connection")
    r = egressd.session.put(f"{egressd.url}/v1/sandboxes/{box}/network",
                            json={"internet": False}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["network"]["internet"] is False
    assert probe(egressd, box, f"{PUBLIC}:80") == {f"{PUBLIC}:80": "refused"}
    # A connection made before the change is judged by the new rules
    # too: its next packet is refused (a reset), it does not go on.
    egressd.shell(box, "touch /tmp/go")
    keeper.join(60)
    assert kept and kept[0].split(" ", 1)[0] == "open", kept
    assert kept[0].split(" ", 1)[1].startswith("error"), kept
    r = egressd.session.put(f"{egressd.url}/v1/sandboxes/{box}/network",
                            json={"internet": False,
                                  "allow_out": [PUBLIC, "10.99.0.10"]},
                            timeout=60)
    assert r.status_code == 200, r.text
    got = probe(egressd, box, f"{PUBLIC}:80", f"{PRIVATE}:80",
                f"{PUBLIC2}:80")
    assert got == {f"{PUBLIC}:80": f"open here {PUBLIC}",
                   f"{PRIVATE}:80": f"open here {PRIVATE}",
                   f"{PUBLIC2}:80": "refused"}
    assert egressd.get(f"/v1/sandboxes/{box}").json()["network"][
        "allow_out"] == [f"{PUBLIC}/32", f"{PRIVATE}/32"]
    for bad in ({"allow_out": ["not a name!"]}, {"internet": "yes"},
                {"allow_out": "10.0.0.0/8"}, {"rules": {}}):
        r = egressd.session.put(
            f"{egressd.url}/v1/sandboxes/{box}/network", json=bad, timeout=60)
        assert r.status_code == 400, (bad, r.text)
    plain = egressd.post("/v1/sandboxes", {"type": "base"})
    assert plain.status_code == 201
    r = egressd.session.put(
        f"{egressd.url}/v1/sandboxes/{plain.json()['container_name']}"
        "/network", json={}, timeout=60)
    assert r.status_code == 409, r.text


def test_root_in_the_sandbox_cannot_flush_the_rules(egressd, world):
    box = create(egressd, "rootnet")["container_name"]
    status = egressd.shell(box, "id -u; grep CapEff /proc/self/status")
    assert status["stdout"].split()[0] == "0"
    assert status["stdout"].split()[-1] == "0000000000000000"
    assert run_py(egressd, box, FLUSH) == "-1"      # -EPERM
    got = probe(egressd, box, f"{PRIVATE}:80", f"{PUBLIC}:80")
    assert got == {f"{PRIVATE}:80": "refused",
                   f"{PUBLIC}:80": f"open here {PUBLIC}"}


def test_the_flush_probe_deletes_the_table_where_it_may(scratch):
    """The FLUSH message is right: with CAP_NET_ADMIN it deletes it."""
    ns = f"egflush{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "add", "table",
                        "inet", "sandboxd"], check=True)
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable,
                              "-c", FLUSH], capture_output=True, text=True)
        assert out.stdout.strip() == "0", out
        tables = subprocess.run(["ip", "netns", "exec", ns, "nft", "list",
                                 "tables"], capture_output=True, text=True)
        assert "sandboxd" not in tables.stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns])


def test_a_network_type_may_not_add_net_admin(start_sandboxd, scratch,
                                              minimal_tag):
    types = write_types(scratch(), {"bad": {
        "from": "minimal", "network": "bridge", "cap_add": ["NET_ADMIN"]}})
    s = start_sandboxd(args=["--types", types], wait=False)
    assert s.wait_exit(30) != 0
    s.expected_exit = s.proc.returncode
    assert "cap_add NET_ADMIN is refused with a network" in s.read_log()


def test_the_operators_lists_hold_for_every_sandbox(start_sandboxd, base_tag,
                                                    world, scratch):
    env = dict(world.sandboxd_env(), SANDBOXD_EGRESS_ALLOW="10.99.0.10",
               SANDBOXD_EGRESS_DENY=f"{PUBLIC2}/32, allowed.test")
    s = start_sandboxd(tag=base_tag, env=env, args=[
        "--types", write_types(scratch(), TYPES)])
    # What the operator denies, no sandbox's list opens.
    box = create(s, network={"allow_out": [PUBLIC2, "allowed.test"]})
    assert f"{PUBLIC2}/32" in box["network"]["denied_by_default"]
    got = probe(s, box["container_name"], f"{PRIVATE}:80", f"{PUBLIC2}:80",
                "allowed.test:80", f"{PUBLIC}:80")
    assert got == {f"{PRIVATE}:80": f"open here {PRIVATE}",
                   f"{PUBLIC2}:80": "refused", "allowed.test:80": "noname",
                   f"{PUBLIC}:80": f"open here {PUBLIC}"}


def test_an_adopted_sandbox_is_policed_again(start_sandboxd, base_tag, world,
                                             scratch):
    """Its rules outlive sandboxd in its namespace, its resolver does not:
    the next sandboxd puts both in again, with the sandbox's own lists."""
    types = write_types(scratch(), TYPES)
    env = dict(world.sandboxd_env(), AUTO_CLEANUP="false")
    s = start_sandboxd(tag=base_tag, env=env, args=["--types", types])
    box = create(s, network={"allow_out": ["10.99.0.0/16"]})[
        "container_name"]
    assert s.stop() == 0
    s2 = start_sandboxd(tag=base_tag, env=env, args=["--types", types],
                        state_dir=s.state_dir)
    wait_until(lambda: s2.get(f"/v1/sandboxes/{box}").json().get("state")
               == "running", 60, what="the sandbox taken back", logs=[s2])
    assert s2.get(f"/v1/sandboxes/{box}").json()["network"][
        "allow_out"] == ["10.99.0.0/16"]
    got = probe(s2, box, "public.test:80", f"{PRIVATE}:80", f"{METADATA}:80")
    assert got == {"public.test:80": f"open here {PUBLIC}",
                   f"{PRIVATE}:80": f"open here {PRIVATE}",
                   f"{METADATA}:80": "refused"}
    s2.post("/cleanup", {})


def test_e2bs_network_options(start_sandboxd, base_tag, world, scratch):
    """E2B's SDK, unchanged: Sandbox.create({network: {allowOut,
    denyOut}}) and allowInternetAccess are the sandbox's egress lists,
    updateNetwork replaces them live (what it omits is cleared), getInfo
    shows the policy in force; what sandboxd lacks is refused naming it,
    and a template without a network says so."""
    s = start_sandboxd(tag=base_tag, token=KEY, env=world.sandboxd_env(),
                       args=["--types", write_types(scratch(), TYPES)])
    made, info = run(s, [
        {"op": "create", "template": "netbox", "opts": {"network": {
            "denyOut": ["0.0.0.0/0"], "allowOut": [PUBLIC2, "allowed.test"]}}},
        {"op": "info"}])
    sid = ok(made)["sandboxId"]
    info = ok(info)
    assert info["allowInternetAccess"] is True
    assert info["network"] == {"allowOut": [f"{PUBLIC2}/32", "allowed.test"],
                               "denyOut": ["0.0.0.0/0"]}, info
    got = probe(s, sid, f"{PUBLIC2}:80", "allowed.test:80", f"{PUBLIC}:80",
                f"{PRIVATE}:80")
    assert got == {f"{PUBLIC2}:80": f"open here {PUBLIC2}",
                   "allowed.test:80": f"open here {PUBLIC2}",
                   f"{PUBLIC}:80": "refused", f"{PRIVATE}:80": "refused"}

    # Internet off: E2B's denyOut of everything, the lists cleared too.
    lines = run(s, [{"op": "connect", "id": sid},
                    {"op": "update_network",
                     "network": {"allowInternetAccess": False}},
                    {"op": "info"}])
    assert ok(lines[1]) is None
    assert ok(lines[2])["allowInternetAccess"] is False
    assert ok(lines[2])["network"] == {"allowOut": [], "denyOut": []}
    got = probe(s, sid, f"{PUBLIC2}:80", "public.test:80")
    assert got == {f"{PUBLIC2}:80": "refused", "public.test:80": "noname"}
    # What an update omits is cleared: the internet is back.
    lines = run(s, [{"op": "connect", "id": sid},
                    {"op": "update_network",
                     "network": {"denyOut": [f"{PUBLIC2}/32"]}},
                    {"op": "info"}])
    assert ok(lines[2])["allowInternetAccess"] is True
    got = probe(s, sid, f"{PUBLIC}:80", f"{PUBLIC2}:80")
    assert got == {f"{PUBLIC}:80": f"open here {PUBLIC}",
                   f"{PUBLIC2}:80": "refused"}

    closed, closed_info, proxy, rules, base, base_update = run(s, [
        {"op": "create", "template": "netbox", "as": "closed",
         "opts": {"allowInternetAccess": False}},
        {"op": "info", "sb": "closed"},
        {"op": "create", "template": "netbox", "as": "x", "opts": {
            "network": {"egressProxy": {"address": "proxy.test:1080"}}}},
        {"op": "create", "template": "netbox", "as": "x", "opts": {
            "network": {"rules": {"api.test": [
                {"transform": {"headers": {"A": "b"}}}]}}}},
        {"op": "create", "template": "base", "as": "base",
         "opts": {"network": {"allowOut": [PUBLIC]}}},
        {"op": "update_network", "sb": "closed",
         "network": {"allowOut": [PUBLIC], "rules": {"api.test": [{}]}}},
    ])
    assert ok(closed_info)["allowInternetAccess"] is False
    got = probe(s, ok(closed)["sandboxId"], f"{PUBLIC}:80", "public.test:80")
    assert got == {f"{PUBLIC}:80": "refused", "public.test:80": "noname"}
    for line, what in ((proxy, "network.egressProxy"),
                       (rules, "network.rules"),
                       (base, "sandbox type 'base', which has no network"),
                       (base_update, "network.rules")):
        e = err(line)
        assert e["statusCode"] == 400 and what in e["message"], e


# A query for "leak-data.test." + "allowed" + "test" (one label holding
# dots).
HEXQ = "1234010000010000000000000f6c65616b2d646174612e746573742e07616c6c6f77656404746573740000010001"


def test_the_resolver_takes_what_a_sandbox_and_upstream_send(egressd, world):
    """A datagram shorter than a DNS header (libevent 2.1's server
    dereferenced NULL on one: sandboxd died) is dropped, and the resolver
    goes on answering; a name without records of the type asked is
    NOERROR, not SERVFAIL; an answer of more addresses than fit in 512
    bytes holds those that fit, untruncated, one record each, and the
    name works; an upstream TTL of 2^31 - 1 reaches the sandbox cut to a
    day, one of 2^32 - 1 as 0 (RFC 2181: the top bit set is 0); an
    allowed name asked again while its address stays let in is answered
    with no longer a TTL than it stays; a name is asked upstream as it
    was judged."""
    box = create(egressd)["container_name"]
    got = json.loads(run_py(egressd, box, ASK, "raw:1234010000",
                            "public.test:28", "public.test:1", "many.test:1",
                            "huge.test:1", "wrap.test:1"))
    assert got["raw:1234010000"] == "timeout"
    assert got["public.test:28"] == {"rcode": 0, "tc": False, "answers": 0,
                                     "ttl": None}
    assert got["public.test:1"] == {"rcode": 0, "tc": False, "answers": 1,
                                    "ttl": 30}
    assert got["many.test:1"] == {"rcode": 0, "tc": False, "answers": 30,
                                  "ttl": 30}, got
    assert got["huge.test:1"]["ttl"] == 86400, got
    assert got["wrap.test:1"]["ttl"] == 0, got
    assert egressd.get("/v1/sandboxes").status_code == 200
    # An allowed name with many addresses: those answered are let in.
    many = create(egressd, network={"internet": False,
                                    "allow_out": ["many.test", "allowed.test",
                                                  "*.allowed.test"]})
    got = probe(egressd, many["container_name"], "many.test:80",
                f"{PUBLIC}:80")
    assert got == {"many.test:80": f"open here {PUBLIC2}",
                   f"{PUBLIC}:80": "refused"}
    # Asked again while its address stays let in: answered at once, with
    # no longer a TTL than it stays, and it still connects.
    first, again = (json.loads(run_py(egressd, many["container_name"], ASK,
                                      "allowed.test:1"))["allowed.test:1"]
                    for _ in range(2))
    # (many.test let its address in already: the same as allowed.test's.)
    assert first["answers"] == again["answers"] == 1, (first, again)
    assert 2 <= again["ttl"] <= first["ttl"] <= 30, (first, again)
    got = probe(egressd, many["container_name"], "allowed.test:80")
    assert got == {"allowed.test:80": f"open here {PUBLIC2}"}
    # A label holding dots: "leak-data.test." then "allowed", "test"
    # reads as a name under *.allowed.test, but would be asked upstream
    # as leak-data.test (its empty label ends the name there), a name on
    # no list, which the internet off must keep in: refused, not asked.
    raw = "raw:" + HEXQ
    got = json.loads(run_py(egressd, many["container_name"], ASK, raw))
    assert got[raw] == {"rcode": 5, "tc": False, "answers": 0, "ttl": None}
    assert "leak-data.test" not in world.asked()
