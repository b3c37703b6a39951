"""A lean HTTP/1.1 client connection for the sync engine's plain requests (direct.py).

`http.client` parses every response's headers with the `email` package (a feed parser, a
policy, a Message object) and makes a new file object per response: about 0.5 ms of CPU a
request on a small VM, half of what a 2 KiB GET costs the pull in all. This connection sends
a request as one write and reads the answer from one buffered reader kept for the
connection's life, splitting the header lines itself. Why not http.client's or urllib3's
pooled keep-alive (urllib3 sits on http.client's parser): measured at 664fe7a on a 1,000 x
2 KiB pull from s3rver, one worker, this connection took the pull thread's CPU from 1.27 s to
0.77 s and `python -m storage.sync pull`'s from 1.32 s to 0.86 s (rclone's 0.88-1.02 s in
the same runs), which the goal of issue 27 (a pull within 1.1x rclone) needed.

It speaks the part of HTTP/1.1 that S3 servers answer with: a status line, header lines, and
a body framed by Content-Length, chunked transfer coding, or the end of the connection. Any
answer it cannot frame (a malformed status line or header, a body cut short) raises
`ProtocolError`; the caller then closes the connection and lets boto3 redo the call.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

MAX_LINE = 65536  # as http.client: a longer status or header line is refused
MAX_HEADERS = 100
_NO_BODY = (204, 304)


class ProtocolError(Exception):
    """An answer that is not the HTTP/1.1 this client reads: the connection is closed."""


class Unreachable(OSError):
    """The connection could not be made (refused, timed out, TLS refused)."""


class NoAnswer(ProtocolError):
    """The connection closed before any answer: on a kept-alive connection, the server's
    idle timeout closed it (the request is sent again on a new one)."""


class Response:
    """A response whose status and headers are read; its body is read by `read` or
    `stream`, after which the connection takes the next request (unless `closing`)."""

    def __init__(self, reader: io.BufferedReader, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers  # names in lower case
        self.finished = False  # the whole body was read: the connection can be used again
        self._reader = reader
        self.closing = headers.get("connection", "").lower() == "close"
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._remaining: int | None = None  # None: until the end of the connection
        if status in _NO_BODY:
            self._remaining = 0
        elif not self._chunked and "content-length" in headers:
            self._remaining = _length(headers["content-length"])
        elif not self._chunked:
            self.closing = True  # the body ends with the connection

    def stream(self, block: int) -> Iterator[bytes]:
        """The body, at most `block` bytes at a time; ProtocolError when it stops early."""
        if self._chunked:
            yield from self._chunks(block)
        elif self._remaining is None:
            while data := self._reader.read1(block):
                yield data
        else:
            while self._remaining:
                data = self._reader.read(min(block, self._remaining))
                if not data:
                    raise ProtocolError("the answer was cut short")
                self._remaining -= len(data)
                yield data
        self.finished = True

    def read(self) -> bytes:
        return b"".join(self.stream(1 << 20))

    def _chunks(self, block: int) -> Iterator[bytes]:
        while True:
            line = _line(self._reader)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
            if size == 0:
                _headers(self._reader)  # trailers, ignored
                return
            while size:
                data = self._reader.read(min(block, size))
                if not data:
                    raise ProtocolError("the answer was cut short")
                size -= len(data)
                yield data
            if _line(self._reader):
                raise ProtocolError("a chunk not followed by CRLF")


class Connection:
    """One keep-alive connection to a host, opened on first use and again after a close or
    after an answer that was not read to its end."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: Callable[[], ssl.SSLContext] | None,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        self.host, self.port, self._tls = host, port, tls
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._sock: socket.socket | None = None
        self._reader: io.BufferedReader | None = None
        self._last: Response | None = None

    def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes = b""
    ) -> Response:
        """Send one request and read the answer's status and headers. Once more on a new
        connection when a kept-alive one closes without answering; OSError or ProtocolError
        otherwise (the caller closes the connection)."""
        head = [f"{method} {target} HTTP/1.1"]
        head.extend(f"{name}: {value}" for name, value in headers.items())
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if self._last is not None and (self._last.closing or not self._last.finished):
            self.close()
        reused = self._sock is not None
        try:
            self._last = self._exchange(message, body)
        except (NoAnswer, ConnectionResetError, BrokenPipeError):
            self.close()
            if not reused:
                raise
            self._last = self._exchange(message, body)
        return self._last

    def close(self) -> None:
        if self._sock is not None:
            assert self._reader is not None
            self._reader.close()
            self._sock.close()
        self._sock, self._reader, self._last = None, None, None

    def _exchange(self, message: bytes, body: bytes) -> Response:
        sock, reader = self._open()
        if len(body) <= 65536:
            sock.sendall(message + body)
        else:  # no copy of a large body
            sock.sendall(message)
            sock.sendall(body)
        return _response(reader)

    def _open(self) -> tuple[socket.socket, io.BufferedReader]:
        if self._sock is None or self._reader is None:
            try:
                sock = self._connect()
            except OSError as error:
                raise Unreachable(error.errno, f"cannot connect: {error}") from error
            self._sock, self._reader = sock, sock.makefile("rb")
        return self._sock, self._reader

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls().wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self._read_timeout)
        except BaseException:
            sock.close()
            raise
        return sock


def _response(reader: io.BufferedReader) -> Response:
    while True:
        line = _line(reader)
        if not line:
            raise NoAnswer("the server closed the connection without an answer")
        version, _, rest = line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"bad status line {line[:60]!r}")
        headers = _headers(reader)
        status = int(code)
        if status >= 200:  # 1xx answers (100 Continue) come before the real one
            response = Response(reader, status, headers)
            if version == b"HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
                response.closing = True
            return response


def _line(reader: io.BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise ProtocolError("a header line longer than 64 KiB")
    return line.rstrip(b"\r\n")


def _headers(reader: io.BufferedReader) -> dict[str, str]:
    """The header lines up to the empty one, names in lower case; repeated names joined."""
    headers: dict[str, str] = {}
    for line in _header_lines(reader):
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"bad header line {line[:60]!r}")
        key, text = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _header_lines(reader: io.BufferedReader) -> list[str]:
    # The usual case: the whole head already sits in the reader's buffer (it came in the
    # same packet as the status line), so one read takes it instead of a readline a header.
    buffered = reader.peek(1)
    end = 0 if buffered.startswith(b"\r\n") else buffered.find(b"\r\n\r\n") + 2
    if end > 1:
        lines = reader.read(end + 2).decode("latin-1").split("\r\n")[:-2]
    else:
        lines = []
        while line := _line(reader):
            lines.append(line.decode("latin-1"))
            if len(lines) > MAX_HEADERS:
                break
    if len(lines) > MAX_HEADERS:
        raise ProtocolError(f"more than {MAX_HEADERS} headers")
    if max(map(len, lines), default=0) > MAX_LINE:
        raise ProtocolError("a header line longer than 64 KiB")
    return lines


def _length(text: str) -> int:
    values = {value.strip() for value in text.split(",")}
    if len(values) != 1 or not (value := values.pop()).isdigit():
        raise ProtocolError(f"bad Content-Length {text[:40]!r}")
    return int(value)
