"""The upstream name server of the egress tests, on 127.0.0.1:PORT (UDP):

  public.test    A 198.51.100.10, TTL 30
  allowed.test   A 203.0.113.10, TTL 30
  private.test   A 10.99.0.10
  metadata.test  A 169.254.169.254
  rebind.test    A 198.51.100.10 the first time, 10.99.0.10 after (TTL 1)
  short.test     A 203.0.113.10, TTL 1
  many.test      40 A: 203.0.113.10, then 203.0.113.100 to .138, TTL 30
  huge.test      A 203.0.113.10, TTL 2^31 - 1
  wrap.test      A 203.0.113.10, TTL 2^32 - 1 (0: RFC 2181)

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
    "huge.test": ("203.0.113.10", 0x7fffffff),
    "wrap.test": ("203.0.113.10", 0xffffffff),
}
MANY = ["203.0.113.10"] + [f"203.0.113.{100 + i}" for i in range(39)]


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
        if name == "many.test":
            found = (MANY, 30)
        records = []
        if found and qtype == 1:
            for a in ([found[0]] if isinstance(found[0], str) else found[0]):
                records.append(b"\xc0\x0c" + struct.pack(
                    ">HHIH", 1, 1, found[1], 4) + socket.inet_aton(a))
        rcode = 0 if found or name == "rebind.test" else 3
        head = data[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1,
                                      len(records), 0, 0)
        answers = b"".join(records)
        s.sendto(head + data[12:end] + answers, peer)


if __name__ == "__main__":
    main()
