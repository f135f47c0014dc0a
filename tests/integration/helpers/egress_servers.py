"""The router's servers (egress_world.py): HTTP on port 80 of every
address, answering "here ADDR" with the address it was reached at
(GET /bulk?n=BYTES answers that many bytes), and a DNS server on
DNS_ADDR:53 answering every A query with that address.

usage: egress_servers.py HTTP_ADDR DNS_ADDR
"""
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

CHUNK = b"x" * 65536


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/bulk":
            n = int(parse_qs(url.query).get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(CHUNK))
                self.wfile.write(CHUNK[:k])
                n -= k
            return
        body = f"here {self.connection.getsockname()[0]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def dns(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    while True:
        data, peer = s.recvfrom(512)
        if len(data) < 17:
            continue
        i = 12
        while i < len(data) and data[i]:
            i += 1 + data[i]
        end = i + 5
        answer = (b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4)
                  + socket.inet_aton(addr))
        s.sendto(data[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
                 + data[12:end] + answer, peer)


def main():
    server = ThreadingHTTPServer((sys.argv[1], 80), Handler)
    threading.Thread(target=dns, args=(sys.argv[2],), daemon=True).start()
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
