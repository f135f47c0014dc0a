"""A DNS server for one name on 127.0.0.1:53, for tests run in their own
network namespace (nothing leaves it): answers NAME's A query with
127.0.0.1 while the file FLAG exists, and drops every query while it does
not, as an unreachable name server would (the resolver then waits out its
timeout). Other names: NXDOMAIN; other types: no answer records.

usage: dns_stub.py NAME FLAG
"""
import os
import socket
import struct
import sys


def question(data):
    """(labels joined with '.', qtype, end offset) of the first question."""
    i, labels = 12, []
    while data[i]:
        n = data[i]
        labels.append(data[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
    return ".".join(labels).lower(), qtype, i + 5


def main():
    name, flag = sys.argv[1].lower(), sys.argv[2]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 53))
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(512)
        if len(data) < 17 or not os.path.exists(flag):
            continue
        qname, qtype, end = question(data)
        ident = data[:2]
        rcode = 0 if qname == name else 3
        answers = b""
        if qname == name and qtype == 1:
            answers = (b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4)
                       + socket.inet_aton("127.0.0.1"))
        head = ident + struct.pack(">HHHHH", 0x8180 | rcode, 1,
                                   1 if answers else 0, 0, 0)
        s.sendto(head + data[12:end] + answers, peer)


if __name__ == "__main__":
    main()
