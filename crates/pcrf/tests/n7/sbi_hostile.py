#!/usr/bin/env python3
"""A hostile HTTP/2 client for the SBI listener, independent of the Rust
stack: frames are built by hand with hyperframe and hpack (the parts of the
Python `h2` package), so the attacks break the rules a well-behaved client
library would not let us break.

Usage: sbi_hostile.py HOST PORT CREATE_BODY_FILE

The listener must limit bodies to 32 KiB (the streamed huge body is 48000
bytes, within the 65535-byte initial window).

Runs every case in order and prints one JSON object per line:
{"case": NAME, ...observations...}. After each case it makes an ordinary
Create on a new connection and reports whether it was answered 201
("others_served"). The Rust test (tests/suite/sbi_hostile.rs) judges the results.
"""

import json
import socket
import sys
import time

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
COLLECTION = "/npcf-smpolicycontrol/v1/sm-policies"
TIMED_OUT = object()


class Frames:
    """Several frames sent as one."""

    def __init__(self, frames):
        self.frames = frames

    def serialize(self):
        return b"".join(f.serialize() for f in self.frames)


class Conn:
    """One h2c connection with prior knowledge, frames by hand."""

    def __init__(self, host, port, settings=None):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.next_id = 1
        self.host = host
        self.port = port
        s = SettingsFrame(0)
        for k, v in (settings or {}).items():
            s.settings[k] = v
        self.sock.sendall(PREFACE + s.serialize())

    def send(self, *frames):
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def send_quietly(self, *frames):
        """Sends, ignoring a connection the server already closed."""
        try:
            self.send(*frames)
        except OSError:
            pass

    def headers(self, method, path, extra=(), end_stream=False, end_headers=True):
        sid = self.next_id
        self.next_id += 2
        h = [
            (":method", method),
            (":scheme", "http"),
            (":authority", f"{self.host}:{self.port}"),
            (":path", path),
        ] + list(extra)
        f = HeadersFrame(sid)
        f.data = self.enc.encode(h)
        if end_headers:
            f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return sid, f

    def data(self, sid, payload, end=True):
        """DATA frames of at most 16384 bytes (the default largest frame)."""
        chunks = [payload[i : i + 16384] for i in range(0, len(payload), 16384)] or [b""]
        frames = []
        for i, chunk in enumerate(chunks):
            f = DataFrame(sid)
            f.data = chunk
            if end and i == len(chunks) - 1:
                f.flags.add("END_STREAM")
            frames.append(f)
        return Frames(frames)

    def read_frame(self, timeout):
        """The next frame; None when the connection closed, TIMED_OUT when
        nothing came within `timeout`."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    f, _ = Frame.parse_frame_header(memoryview(self.buf[:9]))
                    f.parse_body(memoryview(self.buf[9 : 9 + length]))
                    self.buf = self.buf[9 + length :]
                    return f
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return TIMED_OUT
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk

    def answers(self, want, timeout=10, ack_settings=True):
        """Reads until `want` streams are answered, GOAWAY, close or timeout.
        Returns (answers by stream: {status, headers, body}, goaway code or None,
        closed, resets by stream)."""
        out, resets, goaway, closed = {}, {}, None, False
        deadline = time.monotonic() + timeout
        done = set()
        while len(done) < want and time.monotonic() < deadline:
            f = self.read_frame(max(0.05, deadline - time.monotonic()))
            if f is TIMED_OUT:
                continue
            if f is None:
                closed = True
                break
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags and ack_settings:
                ack = SettingsFrame(0)
                ack.flags.add("ACK")
                self.send_quietly(ack)
            elif isinstance(f, HeadersFrame):
                hs = dict(self.dec.decode(f.data))
                hs = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in hs.items()}
                a = out.setdefault(f.stream_id, {"body": b""})
                a.setdefault("status", int(hs.get(":status", 0)))
                a.setdefault("headers", hs)
                if "END_STREAM" in f.flags:
                    done.add(f.stream_id)
            elif isinstance(f, DataFrame):
                a = out.setdefault(f.stream_id, {"body": b""})
                a["body"] += f.data
                if f.data:
                    wu = WindowUpdateFrame(0)
                    wu.window_increment = len(f.data)
                    self.send_quietly(wu)
                if "END_STREAM" in f.flags:
                    done.add(f.stream_id)
            elif isinstance(f, RstStreamFrame):
                resets[f.stream_id] = f.error_code
                done.add(f.stream_id)
            elif isinstance(f, GoAwayFrame):
                # Streams up to its last id are still answered: read on
                # until the server closes.
                goaway = f.error_code
        return out, goaway, closed, resets

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def problem(answer):
    try:
        return json.loads(answer["body"])
    except Exception:
        return None


def summary(answer):
    if answer is None:
        return None
    return {
        "status": answer.get("status"),
        "content_type": answer.get("headers", {}).get("content-type"),
        "location": answer.get("headers", {}).get("location"),
        "problem": problem(answer) if answer.get("headers", {}).get("content-type") == "application/problem+json" else None,
    }


def request(host, port, method, path, body=None, content_type="application/json", extra=()):
    c = Conn(host, port)
    try:
        extra = list(extra)
        if content_type is not None and body is not None:
            extra.append(("content-type", content_type))
        sid, h = c.headers(method, path, extra, end_stream=body is None)
        frames = [h]
        if body is not None:
            frames.append(c.data(sid, body))
        c.send(*frames)
        out, goaway, closed, resets = c.answers(1)
        return summary(out.get(sid))
    finally:
        c.close()


def main():
    host, port, body_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    create = open(body_file, "rb").read()
    good = json.loads(create)

    def others_served():
        a = request(host, port, "POST", COLLECTION, create)
        return a is not None and a["status"] == 201

    def report(name, **obs):
        obs["case"] = name
        obs["others_served"] = others_served()
        print(json.dumps(obs), flush=True)

    # The ordinary answers first.
    report("create", answer=request(host, port, "POST", COLLECTION, create))

    def variant(**changes):
        v = dict(good)
        for k, val in changes.items():
            if val is None:
                v.pop(k, None)
            else:
                v[k] = val
        return json.dumps(v).encode()

    report("malformed_json", answer=request(host, port, "POST", COLLECTION, b'{"supi": "imsi-1", '))
    report("wrong_type", answer=request(host, port, "POST", COLLECTION, variant(pduSessionId="one")))
    report("missing_mandatory", answer=request(host, port, "POST", COLLECTION, variant(supi=None)))
    report("unknown_closed_enum", answer=request(host, port, "POST", COLLECTION, variant(accessType="5G_SATELLITE_ACCESS")))
    report("unknown_extensible_enum", answer=request(host, port, "POST", COLLECTION, variant(ratType="SATELLITE_NR")))
    report("wrong_content_type", answer=request(host, port, "POST", COLLECTION, create, content_type="text/plain"))
    report("unknown_path", answer=request(host, port, "GET", "/npcf-smpolicycontrol/v1/nothing-here"))
    report("wrong_method", answer=request(host, port, "DELETE", COLLECTION))
    report("deep_nesting", answer=request(host, port, "POST", COLLECTION, b"[" * 15000 + b"]" * 15000))

    # A huge body announced by Content-Length: refused before it is read.
    c = Conn(host, port)
    sid, h = c.headers("POST", COLLECTION, [("content-type", "application/json"), ("content-length", str(100 << 20))])
    c.send(h, c.data(sid, b" " * 16000, end=False))
    out, goaway, closed, resets = c.answers(1)
    c.close()
    report("huge_body_declared", answer=summary(out.get(sid)))

    # A huge body sent without a length: refused once past the limit.
    c = Conn(host, port)
    sid, h = c.headers("POST", COLLECTION, [("content-type", "application/json")])
    c.send(h)
    sent = 0
    try:
        for _ in range(3):  # 48000 bytes: past the test's 32 KiB limit, within the initial window
            c.send(c.data(sid, b" " * 16000, end=False))
            sent += 16000
    except OSError:
        pass
    out, goaway, closed, resets = c.answers(1)
    c.close()
    report("huge_body_streamed", answer=summary(out.get(sid)), sent=sent)

    # A thousand streams on one connection, all at once: the server's
    # stream limit refuses those past it; the rest are answered.
    c = Conn(host, port)
    frames = []
    sids = []
    for _ in range(1000):
        sid, h = c.headers("GET", COLLECTION + "/no-such-policy", end_stream=True)
        sids.append(sid)
        frames.append(h)
    c.send(*frames)
    out, goaway, closed, resets = c.answers(1000, timeout=20)
    c.close()
    statuses = {}
    for a in out.values():
        statuses[str(a.get("status"))] = statuses.get(str(a.get("status")), 0) + 1
    report("thousand_streams", answered=statuses, refused=len(resets), goaway=goaway, closed=closed)

    # A thousand streams on one connection by a client that keeps within
    # the stream limit (100 at a time): every one is answered.
    c = Conn(host, port)
    statuses = {}
    goaway = None
    for _ in range(10):
        frames = []
        for _ in range(100):
            sid, h = c.headers("GET", COLLECTION + "/no-such-policy", end_stream=True)
            frames.append(h)
        c.send_quietly(*frames)
        out, goaway, closed, resets = c.answers(100, timeout=20)
        for a in out.values():
            statuses[str(a.get("status"))] = statuses.get(str(a.get("status")), 0) + 1
        if goaway is not None or closed:
            break
    c.close()
    report("thousand_streams_within_limit", answered=statuses, goaway=goaway)

    # Rapid reset (CVE-2023-44487): open and reset streams as fast as we can.
    c = Conn(host, port)
    sent = 0
    goaway = None
    closed = False
    try:
        for batch in range(100):
            frames = []
            for _ in range(100):
                sid, h = c.headers("GET", COLLECTION + "/x", end_stream=True)
                r = RstStreamFrame(sid)
                r.error_code = 8  # CANCEL
                frames += [h, r]
            c.send(*frames)
            sent += 100
    except OSError:
        closed = True
    _, goaway, closed2, _ = c.answers(10 ** 9, timeout=5)
    c.close()
    report("rapid_reset", streams_reset=sent, goaway=goaway, closed=closed or closed2)

    # CONTINUATION flood: one header block that never ends.
    c = Conn(host, port)
    sid, h = c.headers("POST", COLLECTION, [("content-type", "application/json")], end_headers=False)
    sent_bytes = 0
    closed = False
    try:
        c.send(h)
        junk = hpack.Encoder().encode([("x-junk", "a" * 8000)])
        for _ in range(2000):
            cf = ContinuationFrame(sid)
            cf.data = junk
            c.send(cf)
            sent_bytes += len(junk)
    except OSError:
        closed = True
    out, goaway, closed2, resets = c.answers(1, timeout=5)
    c.close()
    report("continuation_flood", bytes_sent=sent_bytes, goaway=goaway, closed=closed or closed2, answer=summary(out.get(sid)), reset=resets.get(sid))

    # SETTINGS flood, never reading the ACKs.
    c = Conn(host, port)
    sent = 0
    closed = False
    try:
        c.sock.settimeout(5)
        for _ in range(100):
            frames = []
            for _ in range(1000):
                s = SettingsFrame(0)
                s.settings[SettingsFrame.MAX_CONCURRENT_STREAMS] = 100
                frames.append(s)
            c.send(*frames)
            sent += 1000
    except OSError:
        closed = True
    # Read on (never answering PINGs): the server's keep-alive closes it.
    _, goaway, closed2, _ = c.answers(10 ** 9, timeout=15, ack_settings=False)
    c.close()
    report("settings_flood", frames_sent=sent, goaway=goaway, closed=closed or closed2)

    # PING flood, never reading the PONGs.
    c = Conn(host, port)
    sent = 0
    closed = False
    try:
        c.sock.settimeout(5)
        for _ in range(100):
            frames = []
            for i in range(1000):
                p = PingFrame(0)
                p.opaque_data = i.to_bytes(8, "big")
                frames.append(p)
            c.send(*frames)
            sent += 1000
    except OSError:
        closed = True
    _, goaway, closed2, _ = c.answers(10 ** 9, timeout=15)
    c.close()
    report("ping_flood", frames_sent=sent, goaway=goaway, closed=closed or closed2)

    # Zero window: we never let the server send a byte of body; it still
    # answers (HEADERS are not flow controlled), holds the body, and closes
    # the connection once we stop answering its PINGs.
    c = Conn(host, port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    sid, h = c.headers("POST", COLLECTION, [("content-type", "application/json")])
    c.send(h, c.data(sid, create))
    status = None
    body_bytes = 0
    closed = False
    goaway = None
    start = time.monotonic()
    while time.monotonic() - start < 30:
        f = c.read_frame(max(0.05, 30 - (time.monotonic() - start)))
        if f is TIMED_OUT:
            continue
        if f is None:
            closed = True
            break
        if isinstance(f, HeadersFrame) and f.stream_id == sid:
            hs = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v) for k, v in c.dec.decode(f.data)}
            status = int(hs.get(":status", 0))
        elif isinstance(f, DataFrame):
            body_bytes += len(f.data)
        elif isinstance(f, GoAwayFrame):
            goaway = f.error_code
    c.close()
    report("zero_window", status=status, body_bytes=body_bytes, closed=closed, goaway=goaway, seconds=round(time.monotonic() - start, 1))


if __name__ == "__main__":
    main()
