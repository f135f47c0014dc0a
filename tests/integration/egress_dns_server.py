"""The upstream name server of the egress tests, on 127.0.0.1:PORT (UDP):

  public.test    A 198.51.100.10, TTL 30
  allowed.test   A 203.0.113.10, TTL 30
  private.test   A 10.99.0.10
  metadata.test  A 169.254.169.254
  rebind.test    A 198.51.100.10 the first time, 10.99.0.10 after (TTL 1)
  short.test     A 203.0.113.10, TTL 1

other names NXDOMAIN, other types no records. Each name it is asked goes
on a line of LOG, for the tests to see what reached it.

usage: egress_dns_server.py PORT LOG
"""
import socket
import struct
import sys

NAMES = {
    "public.test": ("198.51.100.10", 30),
    "allowed.test": ("203.0.113.10", 30),
    "private.test": ("10.99.0.10", 30),
    "metadata.test": ("169.254.169.254", 30),
    "short.test": ("203.0.113.10", 1),
}


def main():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", int(sys.argv[1])))
    log = open(sys.argv[2], "a", buffering=1)
    print("ready", flush=True)
    rebinds = 0
    while True:
        data, peer = s.recvfrom(4096)
        if len(data) < 17:
            continue
        i, labels = 12, []
        while i < len(data) and data[i]:
            labels.append(data[i + 1:i + 1 + data[i]].decode("ascii",
                                                               "replace"))
            i += 1 + data[i]
        qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
        end = i + 5
        name = ".".join(labels).lower()
        log.write(name + "\n")
        found = NAMES.get(name)
        if name == "rebind.test":
            found = ("198.51.100.10" if rebinds == 0 else "10.99.0.10", 1)
            rebinds += qtype == 1
        answers = b""
        if found and qtype == 1:
            answers = (b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, found[1], 4)
                       + socket.inet_aton(found[0]))
        rcode = 0 if found or name == "rebind.test" else 3
        head = data[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1,
                                      1 if answers else 0, 0, 0)
        s.sendto(head + data[12:end] + answers, peer)


if __name__ == "__main__":
    main()
