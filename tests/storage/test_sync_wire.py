"""The sync engine's HTTP/1.1 connection (storage/sync/wire.py) against a loopback server that
answers each request with scripted bytes: every way an S3 server frames a body, a kept-alive
connection the server closed, and the answers it must refuse rather than misread. The same
answers through `Direct` (storage/sync/direct.py) turn into DirectError, so the engine redoes
the call through boto3."""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from storage.datastore import DatastoreConfig
from storage.sync.direct import Direct, DirectError
from storage.sync.wire import Connection, NoAnswer, ProtocolError, Unreachable, _headers

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = "".join(f"{line}\r\n" for line in headers)
    length = f"Content-Length: {len(body)}\r\n" if body or not headers else ""
    return f"HTTP/1.1 {status}\r\n{head}{length}\r\n".encode() + body


@dataclass
class Step:
    """What the server does for one request: send `data`, then close when `close`."""

    data: bytes
    close: bool = False


@dataclass
class Scripted:
    """A loopback server: each request it reads gets the next step. `seen` lists, per
    request, the connection it came on (1, 2, ...), its request line and its headers."""

    steps: list[Step]
    port: int = 0
    seen: list[tuple[int, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def serve(self, listener: socket.socket) -> None:
        number = 0
        while self.steps:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # the test is over
            number += 1
            with sock, contextlib.suppress(OSError):  # the client may go away first
                self._connection(sock, number)

    def _connection(self, sock: socket.socket, number: int) -> None:
        reader = sock.makefile("rb")
        while self.steps:
            line = reader.readline()
            if not line:
                return
            headers = {}
            while header := reader.readline().strip():
                name, _, value = header.decode().partition(":")
                headers[name.lower()] = value.strip()
            reader.read(int(headers.get("content-length", "0")))
            self.seen.append((number, line.decode().strip()))
            self.headers.append(headers)
            step = self.steps.pop(0)
            sock.sendall(step.data)
            if step.close:
                return


@pytest.fixture
def serve() -> Iterator[Callable[..., Scripted]]:
    """Start a scripted server with these steps (one per request, in order)."""
    listener = socket.create_server(("127.0.0.1", 0))
    threads = []

    def start(*steps: Step) -> Scripted:
        scripted = Scripted(steps=list(steps), port=listener.getsockname()[1])
        threads.append(threading.Thread(target=scripted.serve, args=(listener,), daemon=True))
        threads[-1].start()
        return scripted

    yield start
    listener.close()
    for thread in threads:
        thread.join(10)


def connect(server: Scripted) -> Connection:
    return Connection("127.0.0.1", server.port, tls=None, connect_timeout=5, read_timeout=10)


def test_bodies_by_length_share_one_kept_alive_connection(serve: Callable[..., Scripted]) -> None:
    server = serve(Step(answer(b"first", 'ETag: "abc"')), Step(answer(b"second")))
    connection = connect(server)
    first = connection.request("GET", "/b/one", {"Host": "h"})
    assert (first.status, first.headers["etag"], first.read()) == (200, '"abc"', b"first")
    assert connection.request("GET", "/b/two", {"Host": "h"}).read() == b"second"
    connection.close()
    assert server.seen == [(1, "GET /b/one HTTP/1.1"), (1, "GET /b/two HTTP/1.1")]


def test_a_chunked_body_is_decoded_and_the_connection_kept(serve: Callable[..., Scripted]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    server = serve(Step(chunked), Step(answer(b"next")))
    connection = connect(server)
    assert b"".join(connection.request("GET", "/a", {}).stream(3)) == b"hello, world"
    assert connection.request("GET", "/b", {}).read() == b"next"
    connection.close()
    assert [number for number, _ in server.seen] == [1, 1]


def test_a_body_that_ends_with_the_connection_is_read_whole(serve: Callable[..., Scripted]) -> None:
    server = serve(
        Step(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", close=True),
        Step(answer(b"again")),
    )
    connection = connect(server)
    response = connection.request("GET", "/a", {})
    assert (response.read(), response.closing) == (b"until the end", True)
    assert connection.request("GET", "/b", {}).read() == b"again"
    connection.close()
    assert [number for number, _ in server.seen] == [1, 2]


def test_a_body_cut_short_is_an_error_not_a_short_file(serve: Callable[..., Scripted]) -> None:
    server = serve(Step(OK_HEAD + b"Content-Length: 10\r\n\r\n1234", close=True))
    connection = connect(server)
    response = connection.request("GET", "/a", {})
    with pytest.raises(ProtocolError, match="cut short"):
        response.read()
    connection.close()


def test_a_kept_alive_connection_closed_by_the_server_is_opened_again(
    serve: Callable[..., Scripted],
) -> None:
    """The server's idle timeout closes a connection between two requests: the second is
    sent again on a new connection instead of failing."""
    server = serve(Step(answer(b"one"), close=True), Step(answer(b"two")))
    connection = connect(server)
    assert connection.request("GET", "/a", {}).read() == b"one"
    assert connection.request("GET", "/b", {}).read() == b"two"
    connection.close()
    assert server.seen == [(1, "GET /a HTTP/1.1"), (2, "GET /b HTTP/1.1")]


def test_a_new_connection_closed_without_an_answer_is_not_retried(
    serve: Callable[..., Scripted],
) -> None:
    server = serve(Step(b"", close=True), Step(answer(b"never asked")))
    connection = connect(server)
    with pytest.raises(NoAnswer):
        connection.request("GET", "/a", {})
    assert server.seen == [(1, "GET /a HTTP/1.1")]


def test_an_answer_left_unread_never_reaches_the_next_request(
    serve: Callable[..., Scripted],
) -> None:
    server = serve(Step(answer(b"x" * 100_000)), Step(answer(b"fresh")))
    connection = connect(server)
    next(connection.request("GET", "/big", {}).stream(10))  # the rest stays unread
    assert connection.request("GET", "/small", {}).read() == b"fresh"
    connection.close()
    assert [number for number, _ in server.seen] == [1, 2]


def test_interim_answers_are_skipped(serve: Callable[..., Scripted]) -> None:
    server = serve(Step(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"done")))
    connection = connect(server)
    response = connection.request("PUT", "/a", {"Content-Length": "4"}, b"data")
    assert (response.status, response.read()) == (200, b"done")
    connection.close()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", "more than 100 headers"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 4, 5\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    ],
)
def test_answers_it_cannot_frame_are_refused(
    serve: Callable[..., Scripted], data: bytes, message: str
) -> None:
    server = serve(Step(data, close=True))
    connection = connect(server)
    with pytest.raises(ProtocolError, match=message):
        connection.request("GET", "/a", {}).read()
    connection.close()


class Trickle(io.RawIOBase):
    """A stream that gives at most 3 bytes a read, as a slow network would."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = min(3, len(buffer), len(self._data))
        buffer[:size], self._data = self._data[:size], self._data[size:]
        return size


def test_headers_arriving_in_pieces_read_as_whole_ones() -> None:
    head = b'ETag: "e"\r\nContent-Length: 12\r\nX-Amz-Id: a\r\nX-Amz-Id: b\r\n\r\nbody'
    reader = io.BufferedReader(Trickle(head), buffer_size=8)
    assert _headers(reader) == {"etag": '"e"', "content-length": "12", "x-amz-id": "a, b"}
    assert reader.read() == b"body"


def test_a_port_nobody_listens_on_is_unreachable() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    connection = Connection("127.0.0.1", port, tls=None, connect_timeout=5, read_timeout=5)
    with pytest.raises(Unreachable):
        connection.request("GET", "/", {})


def direct(server: Scripted) -> Direct:
    return Direct(
        DatastoreConfig("LOCAL", f"http://127.0.0.1:{server.port}", "us-east-1", "k", "s")
    )


def test_a_get_cut_short_through_direct_is_left_to_boto3(serve: Callable[..., Scripted]) -> None:
    """What the engine redoes through boto3 (DirectError), and the blocks it already wrote
    are the caller's to throw away (it starts the file again)."""
    server = serve(Step(OK_HEAD + b"Content-Length: 8\r\n\r\nhalf", close=True))
    client = direct(server)
    blocks: list[bytes] = []
    with pytest.raises(DirectError, match="cut short"):
        client.get_object("bucket", "key", blocks.append)
    assert client.usable  # one bad answer does not turn plain requests off
    client.close()


def test_a_put_through_direct_is_signed_and_reads_the_etag(
    serve: Callable[..., Scripted],
) -> None:
    server = serve(Step(answer(b"", 'ETag: "0cc175b9c0f1b6a831c399e269772661"')))
    client = direct(server)
    etag = client.put_object(
        "bucket", "a b", b"a", hashlib.md5(b"a", usedforsecurity=False).digest()
    )
    assert etag == "0cc175b9c0f1b6a831c399e269772661"
    assert server.seen == [(1, "PUT /bucket/a%20b HTTP/1.1")]
    sent = server.headers[0]
    assert sent["authorization"].startswith("AWS4-HMAC-SHA256 Credential=k/")
    assert "SignedHeaders=content-length;content-md5;host;" in sent["authorization"]
    assert (sent["content-length"], sent["content-md5"]) == ("1", "DMF1ucDxtqgxw5niaXcmYQ==")
    assert sent["accept-encoding"] == "identity"
    client.close()


def test_an_unreachable_store_turns_plain_requests_off() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    client = Direct(DatastoreConfig("LOCAL", f"http://127.0.0.1:{port}", "us-east-1", "k", "s"))
    with pytest.raises(DirectError):
        client.list_objects("bucket", "")
    assert not client.usable
