"""A stand-in for a user's server (a notebook's editor, an app) on 127.0.0.1: it records what
every request brought (method, path, headers), answers a page the test chooses, streams
`/stream` in pieces, and echoes websocket messages at `/ws` (RFC 6455, written out here so
the test depends on no websocket library's server)."""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class StandIn:
    """The server's state: what it saw, and what it answers."""

    seen: list[Seen] = field(default_factory=list)
    page: bytes = b"<!doctype html><title>stand-in</title><p>the user's server</p>"
    content_type: str = "text/html; charset=utf-8"
    set_cookie: str = ""
    port: int = 0
    # Other answers by path (the part after the last '/'): (body, content type).
    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    # `/stream` sends its first event, then waits for this before the rest: a reader that
    # gets the first event before setting it got it unbuffered.
    release: threading.Event = field(default_factory=threading.Event)

    def cookies_seen(self) -> list[str]:
        """Every cookie name any request brought."""
        names = []
        for seen in self.seen:
            for chunk in seen.headers.get("cookie", "").split(";"):
                if chunk.strip():
                    names.append(chunk.strip().partition("=")[0])
        return names


def read_frame(stream: IO[bytes]) -> tuple[int, bytes]:
    head = stream.read(2)
    if len(head) < 2:
        return 8, b""
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", stream.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", stream.read(8))
    mask = stream.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = stream.read(length)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def frame(opcode: int, payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


def _handler(state: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _record(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.seen.append(Seen(self.command, self.path, headers))

        def do_GET(self) -> None:
            self._record()
            if self.headers.get("Upgrade", "").lower() == "websocket":
                return self._echo()
            if self.path.endswith("/stream"):
                return self._stream()
            name = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
            if name in state.files:
                return self._answer(*state.files[name])
            self._answer(state.page)

        def do_POST(self) -> None:
            self._record()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(b"received %d bytes" % len(body), "text/plain")

        def _answer(self, body: bytes, content_type: str = "") -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type or state.content_type)
            self.send_header("Content-Length", str(len(body)))
            if state.set_cookie:
                self.send_header("Set-Cookie", state.set_cookie)
            self.end_headers()
            self.wfile.write(body)

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n in range(3):
                data = f"data: {n}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if n == 0:
                    state.release.wait(30)
            self.wfile.write(b"0\r\n\r\n")

        def _echo(self) -> None:
            key = self.headers["Sec-WebSocket-Key"]
            accept = base64.b64encode(
                hashlib.sha1((key + GUID).encode(), usedforsecurity=False).digest()
            ).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            while True:
                opcode, payload = read_frame(self.rfile)
                if opcode == 8:
                    self.wfile.write(frame(8, payload[:2]))
                    self.close_connection = True
                    return
                self.wfile.write(frame(10 if opcode == 9 else opcode, payload))
                self.wfile.flush()

    return Handler


def start_standin() -> tuple[StandIn, ThreadingHTTPServer]:
    state = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, server
