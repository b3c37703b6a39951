"""The processes' logs never carry the URLs of outgoing requests: a webhook URL's path is its
secret (Slack's, Teams'), and an app's proxy would log a line per relayed call."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

SECRET = "T0001/B0002/the-webhooks-secret-part"


@pytest.fixture
def receiver() -> Iterator[str]:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_outgoing_requests_url_is_not_logged(
    receiver: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The panel's logging as settings.LOGGING configures it (root at INFO), captured whole.
    answer = httpx.post(f"{receiver}/services/{SECRET}", json={"text": "job done"})
    assert answer.status_code == 200
    assert not [r for r in caplog.records if SECRET in r.getMessage()]
    assert not [r for r in caplog.records if r.name.startswith(("httpx", "httpcore"))]
