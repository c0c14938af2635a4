#!/usr/bin/env python3
"""scripts/hostile/attack.py: the raw-socket attackers of scripts/hostile/run.

Python 3 with the standard library only: the frames are written by hand from
docs/protocol.md (the 16-byte prefix, a msgpack map header) and the HMAC-SHA256 proofs
from its "Authentication" section.  Each mode runs until --until (a Unix time) and then
exits; every loop is bounded in count and time, every socket connects to 127.0.0.1 only.
The harness starts each attacker as a process of its own and ends it by its pid.

  attack.py flood   --port P --until T [--src 127.0.0.1] [--hold 8] [--rate 20]
      holds --hold unauthenticated sockets from --src (each sends nothing, the server's
      auth deadline closes it, it is opened again) and opens --rate connections a second
      more that are refused at once (a stray HTTP request, a wrong magic, or the
      per-address cap), from --src and from other 127.x addresses.
  attack.py crafted --port P --until T [--secret-file F --run R --mh H --ph H --blk B]
                    [--utf8-after T2] [--rate 10]
      crafted and random frames, before authentication and (with the secret) after it,
      in the HELLO stage; from --utf8-after on, also the frames whose text is not valid
      UTF-8 (an ERROR before authentication, a HELLO's run id and codec name after it).
  attack.py stall   --port P --until T --secret-file F --run R --mh H --ph H --blk B --id K
                    [--preauth 16]
      authenticates, says HELLO as learner K (1-based, a live id), then never reads again
      (a tiny receive buffer) while it sends heartbeats as K; and holds --preauth sockets
      that sent AUTH and never read the challenge.
Each prints one line of counts at its end (stdout).
"""
import argparse
import hashlib
import hmac
import os
import random
import socket
import struct
import sys
import time

MAGIC = b"DLCW"
AUTH, AUTH_CHALLENGE, AUTH_PROOF, HELLO, WELCOME, HEARTBEAT, CONTRIBUTION = 1, 2, 3, 4, 5, 6, 7
FRAGMENT, GRADIENT, GRADIENT_AVG, RESYNC, BYE, ERROR, REPLAY = 8, 9, 10, 11, 12, 13, 14


# ---- msgpack, the few shapes a header uses ----

class Raw(bytes):
    """Bytes put in the header as they are (a crafted value)."""


class U64(int):
    """An integer always written as uint64 (the hashes mh, ph)."""


class Str(bytes):
    """Bytes written as a msgpack str (maybe not valid UTF-8)."""


def mp(v):
    if isinstance(v, Raw):
        return bytes(v)
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, U64):
        return b"\xcf" + struct.pack(">Q", v)
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if 0 <= v < 1 << 32:
            return b"\xce" + struct.pack(">I", v)
        if 0 <= v < 1 << 64:
            return b"\xcf" + struct.pack(">Q", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, Str):
        b = bytes(v)
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        if len(b) < 256:
            return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, str):
        return mp(Str(v.encode()))
    if isinstance(v, (bytes, bytearray)):
        return b"\xc4" + bytes([len(v)]) + bytes(v)
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(type(v))


def container_count(b, i, fix_max, c16):
    """The entry count of the map or array whose type byte is b[i] (fix form up to
    fix_max, 16-bit count c16, 32-bit c16 + 1): (count, the index after the count)."""
    t = b[i]
    if t <= fix_max:
        return t & 15, i + 1
    if t == c16:
        return struct.unpack_from(">H", b, i + 1)[0], i + 3
    return struct.unpack_from(">I", b, i + 1)[0], i + 5


def unmp(b, i=0):
    """One msgpack value of b at i: (value, next i).  Only what a server's handshake
    frames hold; anything else raises ValueError."""
    t = b[i]
    if t <= 0x7F:
        return t, i + 1
    if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF):
        n, i = container_count(b, i, 0x8F, 0xDE)
        out = {}
        for _ in range(n):
            k, i = unmp(b, i)
            v, i = unmp(b, i)
            out[k] = v
        return out, i
    if 0x90 <= t <= 0x9F or t in (0xDC, 0xDD):
        n, i = container_count(b, i, 0x9F, 0xDC)
        out = []
        for _ in range(n):
            v, i = unmp(b, i)
            out.append(v)
        return out, i
    if 0xA0 <= t <= 0xBF:
        n = t & 31
        return b[i + 1:i + 1 + n].decode("utf-8", "replace"), i + 1 + n
    if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        w = {0xD9: 1, 0xC4: 1, 0xDA: 2, 0xC5: 2, 0xDB: 4, 0xC6: 4}[t]
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        raw = b[i + 1 + w:i + 1 + w + n]
        return (raw if t in (0xC4, 0xC5, 0xC6) else raw.decode("utf-8", "replace")), i + 1 + w + n
    if t == 0xC0:
        return None, i + 1
    if t in (0xC2, 0xC3):
        return t == 0xC3, i + 1
    if t >= 0xE0:
        return t - 256, i + 1
    fmt = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
           0xCA: ">f", 0xCB: ">d"}.get(t)
    if fmt is None:
        raise ValueError("msgpack byte %02x" % t)
    return struct.unpack_from(fmt, b, i + 1)[0], i + 1 + struct.calcsize(fmt)


def frame(ftype, header, payload=b"", version=1, reserved=0, length=None, hlen=None):
    h = header if isinstance(header, (bytes, bytearray)) else mp(header)
    n = len(h) + len(payload) if length is None else length
    return MAGIC + struct.pack(">BBHII", version, ftype, reserved, n, len(h) if hlen is None else hlen) + h + payload


def read_frame(s, deadline):
    """One frame from s before deadline: (type, header dict or None), or None."""
    buf = b""
    while len(buf) < 16:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(16 - len(buf))
        if not chunk:
            return None
        buf += chunk
    if buf[:4] != MAGIC:
        return None
    ftype = buf[5]
    n, hl = struct.unpack_from(">II", buf, 8)
    if n > 1 << 20:
        return None
    body = b""
    while len(body) < n:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    try:
        hdr, _ = unmp(body[:hl])
    except (ValueError, IndexError, struct.error):
        hdr = None
    return ftype, hdr


# ---- connections ----

def connect(port, src="127.0.0.1", timeout=2.0, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    if src != "127.0.0.1":
        s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def quiet_close(s):
    try:
        s.close()
    except OSError:
        pass


def authenticate(s, secret, deadline):
    """AUTH, AUTH_CHALLENGE, AUTH_PROOF as a learner that knows the secret: True once the
    proof is sent (the server checked its own proof first)."""
    nc = os.urandom(32)
    s.sendall(frame(AUTH, {"n": nc}))
    got = read_frame(s, deadline)
    if not got or got[0] != AUTH_CHALLENGE or not isinstance(got[1], dict):
        return False
    ns = got[1].get("n")
    if not isinstance(ns, bytes) or len(ns) != 32:
        return False
    want = hmac.new(secret, b"diloco-server" + nc + ns, hashlib.sha256).digest()
    if not hmac.compare_digest(want, got[1].get("m") or b""):
        return False
    s.sendall(frame(AUTH_PROOF, {"m": hmac.new(secret, b"diloco-client" + ns + nc, hashlib.sha256).digest()}))
    return True


def hello(args, learner, run=None, codecs=None):
    """A HELLO as an older learner would send it (no rh/rp: compared on mh, ph, blk)."""
    return {"pmin": 1, "pmax": 1, "run": run if run is not None else args.run, "mh": U64(int(args.mh, 16)),
            "ph": U64(int(args.ph, 16)), "l": learner, "caps": ["resync_phase"],
            "codecs": codecs if codecs is not None else ["f32"], "blk": args.blk}


def heartbeat(learner, steps=0):
    return frame(HEARTBEAT, {"l": learner, "s": steps, "t": 0, "st": 0.5, "tr": 0.0, "e": 0, "i": 0})


def pace(t_next, rate):
    """Sleeps until t_next; the next time for `rate` a second."""
    d = t_next - time.time()
    if d > 0:
        time.sleep(d)
    return max(t_next, time.time() - 1.0) + 1.0 / rate


# ---- flood ----

def flood(a):
    hold, socks = [], []
    count = {"held": 0, "churn": 0, "errors": 0}
    others = ["127.0.%d.%d" % (random.randint(1, 250), random.randint(2, 250)) for _ in range(64)]
    t_next = time.time()
    n_loop = 0
    while time.time() < a.until and n_loop < 10_000_000:
        n_loop += 1
        # the held sockets: refill any the server has closed (its auth deadline)
        alive = []
        for s in hold:
            try:
                s.settimeout(0)
                if s.recv(4096) == b"":
                    quiet_close(s)
                    continue
            except BlockingIOError:
                pass
            except OSError:
                quiet_close(s)
                continue
            alive.append(s)
        hold = alive
        while len(hold) < a.hold and time.time() < a.until:
            try:
                hold.append(connect(a.port, a.src))
                count["held"] += 1
            except OSError as e:
                count["errors"] += 1
                key = "error " + (os.strerror(e.errno) if e.errno else type(e).__name__)
                count[key] = count.get(key, 0) + 1
                break
        # the churn: connections refused at once
        if a.rate > 0:
            t_next = pace(t_next, a.rate)
            src = a.src if n_loop % 2 else random.choice(others)
            try:
                s = connect(a.port, src, timeout=1.0)
                kind = n_loop % 3
                if kind == 0:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                elif kind == 1:
                    s.sendall(b"XXXX" + os.urandom(12))
                else:
                    s.sendall(frame(AUTH_PROOF, {"m": os.urandom(32)}))
                socks.append(s)
                count["churn"] += 1
            except OSError as e:
                count["errors"] += 1
                key = "error " + (os.strerror(e.errno) if e.errno else type(e).__name__)
                count[key] = count.get(key, 0) + 1
            while len(socks) > 32:
                quiet_close(socks.pop(0))
        else:
            time.sleep(0.1)
    for s in hold + socks:
        quiet_close(s)
    print("flood", count, flush=True)


# ---- crafted frames ----

def preauth_frames(rng, utf8):
    """Crafted and random frames for a connection that has not authenticated."""
    big = 0xFFFFFFFF
    out = [
        b"GET / HTTP/1.0\r\n\r\n",
        b"DLCX" + bytes(12),                                            # wrong magic
        MAGIC + struct.pack(">BBHII", 2, AUTH, 0, 8, 4) + bytes(8),    # frame version 2
        MAGIC + struct.pack(">BBHII", 1, 0, 0, 8, 4) + bytes(8),       # type 0
        MAGIC + struct.pack(">BBHII", 1, 99, 0, 8, 4) + bytes(8),      # unknown type
        MAGIC + struct.pack(">BBHII", 1, AUTH, 7, 8, 4) + bytes(8),    # reserved bytes
        MAGIC + struct.pack(">BBHII", 1, AUTH, 0, big, 4),             # 4 GiB declared
        MAGIC + struct.pack(">BBHII", 1, AUTH, 0, 2000, 4),            # over the 1 KiB pre-auth limit
        MAGIC + struct.pack(">BBHII", 1, AUTH, 0, 8, 0) + bytes(8),    # header length 0
        MAGIC + struct.pack(">BBHII", 1, AUTH, 0, 8, 9) + bytes(8),    # header longer than the frame
        frame(AUTH, Raw(b"\xdd\xff\xff\xff\xff")),                       # array32 of 4G items
        frame(AUTH, Raw(b"\xdb\xff\xff\xff\xff")),                       # str32 of 4 GiB
        frame(AUTH, Raw(b"\x81\xa1n\x91\x91\x91\x91\x91\x91\x90")),     # nesting past 3
        frame(AUTH, Raw(b"\x81\xa1n\xc1")),                             # the never-used byte
        frame(AUTH, Raw(b"\x81\xa1n\xd4\x01\x02")),                     # ext
        frame(AUTH, Raw(b"\x82\xa1n\xc4\x20" + bytes(32) + b"\xa1n\xc4\x20" + bytes(32))),  # key twice
        frame(AUTH, {"n": os.urandom(31)}),                             # short nonce
        frame(AUTH, {"n": "not bytes"}),                                # wrong type
        frame(AUTH, {"x": 1}),                                          # no nonce
        frame(AUTH, {"n": os.urandom(32)}, payload=b"payload"),         # payload on AUTH
        frame(AUTH_PROOF, {"m": os.urandom(32)}),                       # proof before AUTH
        frame(HELLO, {"run": "x"}),                                     # HELLO before AUTH
        frame(HEARTBEAT, {"l": 0, "s": 0, "t": 0, "st": 0.0, "tr": 0.0}),
        frame(CONTRIBUTION, {"l": 0}, payload=os.urandom(64)),
        frame(BYE, {"l": 0, "text": "bye " * 100}),
        frame(ERROR, {"code": 1, "text": "a peer's error " * 30}),      # long, valid text
        frame(ERROR, {"code": 300, "text": "code out of range"}),
        frame(ERROR, {"code": 4, "text": "ends with a newline\n\"and quotes\"\t\\"}),
        frame(ERROR, {"code": 4, "text": "\u00e9\u4e2d\U0001f600 valid UTF-8"}),
        frame(ERROR, {"code": 4, "text": Str(b"a NUL \x00 inside")}),
        frame(ERROR, {"code": 4, "text": "ctrl \x01\x02\x1b[31m"}),
        frame(AUTH, {"n": os.urandom(32)})[:20],                        # truncated
        os.urandom(rng.randint(1, 64)),                                 # random bytes
        MAGIC + os.urandom(rng.randint(12, 200)),                       # random after the magic
        MAGIC + bytes([1, rng.randint(1, 14), 0, 0]) + os.urandom(rng.randint(8, 300)),
    ]
    if utf8:
        out += [
            frame(ERROR, {"code": 1, "text": Str(b"bad \xff\xfe utf-8 \xc3")}),
            frame(ERROR, {"code": 4, "text": Str(b"\xed\xa0\x80 surrogate, \xc0\xaf overlong")}),
            frame(ERROR, {"code": 5, "text": Str(bytes(rng.randrange(128, 256) for _ in range(40)))}),
            frame(BYE, {"l": 0, "text": Str(b"\xff bye")}),
        ]
    return out


def postauth_frames(a, rng, utf8):
    """Frames sent after a valid AUTH_PROOF, where the HELLO belongs."""
    out = [
        frame(HEARTBEAT, {"l": 0, "s": 0, "t": 0, "st": 0.0, "tr": 0.0}),
        frame(AUTH, {"n": os.urandom(32)}),
        frame(HELLO, {"run": a.run}),                                   # keys missing
        frame(HELLO, dict(hello(a, 0), pmin=9, pmax=9)),                # no version in common
        frame(HELLO, dict(hello(a, 0), pmin=3, pmax=1)),                # min > max
        frame(HELLO, dict(hello(a, 0), mh=U64(1))),                     # another model
        frame(HELLO, dict(hello(a, 0), ph=U64(2))),                     # another plan
        frame(HELLO, dict(hello(a, 0), blk=33)),                        # odd block
        frame(HELLO, hello(a, 0, run="another-run")),                   # another run
        frame(HELLO, hello(a, 0, codecs=["int4"])),                     # no f32 in common
        frame(HELLO, hello(a, 70000)),                                  # id out of range
        frame(HELLO, hello(a, a.learners)),                             # the id after the run's last
        frame(HELLO, dict(hello(a, 0), caps=["x%d" % i for i in range(40)])),  # too many caps
        frame(HELLO, hello(a, 0), payload=b"x"),                        # payload on HELLO
        frame(ERROR, {"code": 6, "text": "a peer's mismatch"}),
        MAGIC + struct.pack(">BBHII", 1, HELLO, 0, 5000, 4),            # over the pre-HELLO limit
        MAGIC + bytes([1, HELLO, 0, 0]) + os.urandom(rng.randint(8, 300)),
        os.urandom(rng.randint(1, 100)),
    ]
    if utf8:
        out += [
            frame(HELLO, hello(a, 0, run=Str(b"run-\xff\xfe"))),       # run id not UTF-8
            frame(HELLO, hello(a, 0, codecs=["f32", Str(b"\xc3\x28")])),  # codec name not UTF-8
            frame(ERROR, {"code": 1, "text": Str(b"\xf8\x88\x80\x80\x80")}),
        ]
    return out


def send_and_close(a, data, secret=None, deadline=None):
    s = connect(a.port, a.src, timeout=2.0)
    try:
        if secret is not None and not authenticate(s, secret, deadline):
            return "auth"
        s.sendall(data)
        # read what the server answers (its ERROR), briefly: a well-behaved bad peer
        end = min(deadline, time.time() + 0.5)
        while time.time() < end:
            got = read_frame(s, end)
            if not got:
                break
        return "sent"
    finally:
        quiet_close(s)


def crafted(a):
    rng = random.Random(a.seed)
    secret = read_secret(a.secret_file) if a.secret_file else None
    count = {"pre": 0, "post": 0, "utf8_pre": 0, "utf8_post": 0, "errors": 0}
    t_next = time.time()
    n = 0
    while time.time() < a.until and n < 1_000_000:
        n += 1
        utf8 = a.utf8_after is not None and time.time() >= a.utf8_after
        post = secret is not None and a.run and n % 2 == 0
        frames = postauth_frames(a, rng, utf8) if post else preauth_frames(rng, utf8)
        # from --utf8-after on, every other pick is one of the non-UTF-8 frames (the last ones)
        k = rng.randrange(len(frames))
        if utf8 and n % 4 < 2:
            k = len(frames) - 1 - rng.randrange(3 if post else 4)
        t_next = pace(t_next, a.rate)
        deadline = min(a.until, time.time() + 3.0)
        try:
            r = send_and_close(a, frames[k], secret if post else None, deadline)
            if r == "sent":
                key = ("post" if post else "pre")
                count[("utf8_" + key) if utf8 and k >= len(frames) - (3 if post else 4) else key] += 1
            else:
                count["errors"] += 1
        except OSError:
            count["errors"] += 1
    print("crafted", count, flush=True)


# ---- a peer that stops reading ----

def stall(a):
    """A holder of the secret that says HELLO as learner a.id and then reads nothing while
    it sends heartbeats; each time the syncer cuts it off it comes back, until a.until.
    Counts its connections, those welcomed, those the syncer cut, and how long each lived."""
    secret = read_secret(a.secret_file)
    count = {"ready": 0, "cut": 0, "heartbeats": 0, "preauth": 0, "errors": 0, "refused": "", "lived_max": 0.0}
    pre = []
    for _ in range(a.preauth):
        try:
            s = connect(a.port, "127.0.1.%d" % (2 + len(pre)), rcvbuf=1024)
            s.sendall(frame(AUTH, {"n": os.urandom(32)}))
            pre.append(s)
            count["preauth"] += 1
        except OSError:
            count["errors"] += 1
    attempts = 0
    while time.time() < a.until and attempts < 10000:
        attempts += 1
        s = None
        try:
            s = connect(a.port, a.src, timeout=3.0, rcvbuf=4096)
            deadline = time.time() + 5.0
            ready = False
            if authenticate(s, secret, deadline):
                s.sendall(frame(HELLO, hello(a, a.id - 1)))
                got = read_frame(s, deadline)
                if got and got[0] == WELCOME:
                    ready = True
                    count["ready"] += 1
                elif got and isinstance(got[1], dict):
                    count["refused"] = str(got[1].get("text", ""))[:200]
            # from here on: never read; heartbeats keep the connection alive until the
            # syncer cuts it off (a send then fails, or times out on a full socket)
            t0 = t_next = time.time()
            while ready and time.time() < a.until and count["heartbeats"] < 1_000_000:
                t_next = pace(t_next, 2.0)
                try:
                    s.settimeout(2.0)
                    s.sendall(heartbeat(a.id - 1))
                    count["heartbeats"] += 1
                except OSError:
                    count["cut"] += 1
                    count["lived_max"] = max(count["lived_max"], round(time.time() - t0, 1))
                    break
            if not ready:
                time.sleep(min(1.0, max(0.0, a.until - time.time())))
        except OSError:
            count["errors"] += 1
            time.sleep(min(1.0, max(0.0, a.until - time.time())))
        finally:
            if s:
                quiet_close(s)
    for p in pre:
        quiet_close(p)
    print("stall", count, flush=True)


def read_secret(path):
    with open(path, "rb") as f:
        b = f.read()
    return b[:-1] if b.endswith(b"\n") else b


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["flood", "crafted", "stall"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--until", type=float, required=True, help="a Unix time: stop then")
    p.add_argument("--src", default="127.0.0.1", help="the source address (a 127.x address)")
    p.add_argument("--hold", type=int, default=8)
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--secret-file")
    p.add_argument("--run")
    p.add_argument("--mh")
    p.add_argument("--ph")
    p.add_argument("--blk", type=int, default=128)
    p.add_argument("--id", type=int, default=1)
    p.add_argument("--learners", type=int, default=4, help="the run's learners (crafted: a HELLO for one more)")
    p.add_argument("--preauth", type=int, default=16)
    p.add_argument("--utf8-after", type=float)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if not a.src.startswith("127."):
        sys.exit("--src: a loopback address (127.x) only")
    if a.until - time.time() > 24 * 3600:
        sys.exit("--until: more than a day away")
    random.seed(a.seed)
    {"flood": flood, "crafted": crafted, "stall": stall}[a.mode](a)


if __name__ == "__main__":
    main()
