"""The network world of the egress tests, built on this machine alone.

A namespace of the test's, the "router", stands for everything a sandbox
could reach: on its loopback it holds 198.51.100.10 and 203.0.113.10 ("the
internet", TEST-NET ranges), 10.99.0.10 ("a private service") and
169.254.169.254 ("the metadata service"), with an HTTP server answering
on all of them (and a DNS server on 198.51.100.53); its veth end is the
gateway, 10.254.N.1 ("the host" a sandbox sees). The sandboxes join a
Docker macvlan network on the host's end of that veth (crun: a bridge of
the test's with that end in it, the router its gateway), which carries no
address, so their packets reach the router and nothing else: the router
has no route out and forwards nothing, even when a policy is broken.

The name server sandboxd asks (upstream) listens on the host's
127.0.0.1; egress_dns_server.py says what it answers.

Everything it makes is removed by close(), also after a failure.
"""
import os
import random
import socket
import subprocess
import sys
import time

from sandboxd_fixtures import BACKEND

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLIC = "198.51.100.10"
PUBLIC2 = "203.0.113.10"
PRIVATE = "10.99.0.10"
METADATA = "169.254.169.254"
ROUTER_DNS = "198.51.100.53"


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check,
                          timeout=120)


class World:
    def __init__(self, backend=BACKEND):
        """backend: the sandboxd it is for (a test that runs crun
        whatever the suite's backend says gives "crun")."""
        self.backend = backend
        self.n = random.randint(2, 250)
        self.suffix = f"{os.getpid() % 10000}{self.n}"
        self.router = f"egr{self.suffix}"
        self.parent = f"egp{self.suffix}"
        self.network = f"sbxd-egress-{self.suffix}"
        self.bridge = f"egb{self.suffix}"
        self.subnet = f"10.254.{self.n}.0/24"
        self.gateway = f"10.254.{self.n}.1"
        self.procs = []
        self.made_netns = self.made_link = self.made_network = False
        self.made_bridge = False
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        sh("ip", "netns", "add", self.router)
        self.made_netns = True
        sh("ip", "link", "add", self.parent, "type", "veth", "peer", "name",
           "wan0", "netns", self.router)
        self.made_link = True
        sh("ip", "link", "set", self.parent, "up")
        ns = ("ip", "netns", "exec", self.router)
        sh(*ns, "ip", "link", "set", "lo", "up")
        sh(*ns, "ip", "link", "set", "wan0", "up")
        sh(*ns, "ip", "addr", "add", f"{self.gateway}/24", "dev", "wan0")
        for a in (PUBLIC, PUBLIC2, PRIVATE, METADATA, ROUTER_DNS):
            sh(*ns, "ip", "addr", "add", f"{a}/32", "dev", "lo")
        if self.backend == "crun":
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            self.made_bridge = True
            sh("ip", "link", "set", self.parent, "master", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
        else:
            sh("docker", "network", "create", "-d", "macvlan", "--subnet",
               self.subnet, "--gateway", self.gateway, "-o",
               f"parent={self.parent}", self.network)
            self.made_network = True
        self.http = self._spawn(*ns, sys.executable,
                                os.path.join(HERE, "egress_servers.py"),
                                "0.0.0.0", ROUTER_DNS)
        # The upstream name server, on the host's loopback.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        self.dns_port = s.getsockname()[1]
        s.close()
        self.dns_log = f"/tmp/egress-dns-{self.suffix}.log"
        self.dns = self._spawn(sys.executable,
                               os.path.join(HERE, "egress_dns_server.py"),
                               str(self.dns_port), self.dns_log)

    def _spawn(self, *args):
        p = subprocess.Popen(args, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        line = p.stdout.readline()
        assert line.startswith("ready"), f"{args[-3:]}: {line}"
        return p

    def asked(self):
        """The names the upstream name server was asked so far."""
        with open(self.dns_log) as f:
            return f.read().split()

    def sandboxd_env(self):
        dns = {"SANDBOXD_EGRESS_DNS": f"127.0.0.1:{self.dns_port}"}
        if self.backend == "crun":
            return dict(dns, SANDBOXD_BRIDGE=self.bridge,
                        SANDBOXD_BRIDGE_SUBNET=self.subnet,
                        SANDBOXD_BRIDGE_GATEWAY=self.gateway)
        return dict(dns, SANDBOXD_NETWORK=self.network)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        if self.made_network:
            sh("docker", "network", "rm", self.network, check=False)
        if self.made_bridge:
            # The forwarding rule sandboxd made for it (it keeps a
            # bridge's rules, as Docker does docker0's).
            sh("iptables", "-w", "-D", "FORWARD", "-i", self.bridge, "-o",
               self.bridge, "-j", "ACCEPT", check=False)
            sh("ip", "link", "del", self.bridge, check=False)
        if self.made_link:
            sh("ip", "link", "del", self.parent, check=False)
        if self.made_netns:
            sh("ip", "netns", "del", self.router, check=False)
        if os.path.exists(getattr(self, "dns_log", "")):
            os.unlink(self.dns_log)
