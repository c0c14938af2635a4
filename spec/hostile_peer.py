#!/usr/bin/env python3
"""A hostile peer for spec/hostile_spec.lua: raw sockets against a live syncer, written
from docs/protocol.md alone (the standard library only).  Loopback addresses only; every
loop is bounded in count and time.

  hostile_peer.py error-utf8 HOST:PORT        one ERROR frame before authentication whose
                                              text is not UTF-8 and holds terminal escapes
  hostile_peer.py hold HOST:PORT N SECONDS    keeps N sockets open from this address, each
                                              silent (reopened when the syncer closes one),
                                              for SECONDS; prints "holding N" once all are up
  hostile_peer.py churn HOST:PORT N           opens and closes N sockets, each sending a
                                              frame of garbage, one after another
"""
import socket
import struct
import sys
import time
import select


def addr_of(text):
    host, port = text.rsplit(":", 1)
    if not (host.startswith("127.") or host in ("localhost", "::1", "[::1]")):
        sys.exit("hostile_peer: loopback addresses only, not " + host)
    return host, int(port)


def msgpack_str(b):
    if len(b) < 32:
        return bytes([0xa0 | len(b)]) + b
    return bytes([0xd9, len(b)]) + b


def frame(msg_type, header):
    # prefix: magic, frame version 1, type, 2 reserved, length, header length
    return b"DLCW" + bytes([1, msg_type, 0, 0]) + struct.pack(">II", len(header), len(header)) + header


def error_frame(code, text):
    header = bytes([0x82]) + msgpack_str(b"code") + bytes([code]) + msgpack_str(b"text") + msgpack_str(text)
    return frame(13, header)  # ERROR is message type 13


def connect(addr):
    s = socket.create_connection(addr, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def error_utf8(addr):
    s = connect(addr)
    s.sendall(error_frame(10, b"ERR\xff\xfe \x1b[2J caf\xc3\xa9 \xed\xa0\x80 end \xe2\x82"))
    try:
        s.recv(4096)  # the syncer closes it
    except OSError:
        pass
    s.close()
    print("sent")


def hold(addr, n, seconds):
    end = time.monotonic() + seconds
    socks = []
    reopened = 0
    announced = False
    while time.monotonic() < end:
        while len(socks) < n and reopened < 100000:
            try:
                socks.append(connect(addr))
                reopened += 1
            except OSError:
                time.sleep(0.01)
                break
        if len(socks) == n and not announced:
            print("holding", n, flush=True)
            announced = True
        r, _, _ = select.select(socks, [], [], 0.05)
        for s in r:  # closed by the syncer (evicted, timed out): open another
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                socks.remove(s)
                s.close()
    for s in socks:
        s.close()
    print("reopened", reopened, flush=True)


def churn(addr, n):
    for _ in range(n):
        try:
            s = connect(addr)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.close()
        except OSError:
            pass
    print("churned", n)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, addr = argv[1], addr_of(argv[2])
    if cmd == "error-utf8":
        error_utf8(addr)
    elif cmd == "hold":
        hold(addr, int(argv[3]), float(argv[4]))
    elif cmd == "churn":
        churn(addr, int(argv[3]))
    else:
        sys.exit("hostile_peer: unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
