"""`make run`'s ports: the default when free, the next free one when it is taken (said once),
and a refusal naming the variable when the user's own choice is taken."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from controlpanel.localrun.ports import Port, PortTaken, choose_port, port_free


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_taken_default_moves_to_the_next_free_port_and_says_so(
    listening: int, capsys: pytest.CaptureFixture[str]
) -> None:
    port = Port("the web", "AJUSTE_BIND", listening)
    notes: list[str] = []
    chosen = choose_port(port, host="127.0.0.1", chosen=None, taken=set(), notes=notes)
    assert chosen > listening and port_free("127.0.0.1", chosen)
    assert notes == [
        f"• port {listening} is taken: port {chosen} for the web (AJUSTE_BIND chooses another)"
    ]
    assert capsys.readouterr().out == ""  # said by make run once the start may go on
    # a port given to another of make run's servers is skipped too
    again = choose_port(port, host="127.0.0.1", chosen=None, taken={chosen}, notes=notes)
    assert again not in (listening, chosen)


def test_a_free_default_is_kept_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = int(sock.getsockname()[1])
    port = Port("the embedded Redis", "AJUSTE_REDIS_PORT", free)
    notes: list[str] = []
    assert choose_port(port, host="127.0.0.1", chosen=None, taken=set(), notes=notes) == free
    assert capsys.readouterr().out == "" and notes == []


def test_a_chosen_port_that_is_taken_is_refused_with_how_to_choose(listening: int) -> None:
    port = Port("the web", "AJUSTE_BIND", 8000)
    with pytest.raises(PortTaken) as refused:
        choose_port(port, host="127.0.0.1", chosen=listening, taken=set(), notes=[])
    message = str(refused.value)
    assert message.startswith(f"make run: port {listening} (AJUSTE_BIND, the web) is taken")
    assert "AJUSTE_BIND=127.0.0.1:" in message and message.endswith(" make run")
    s3 = Port("the embedded object store", "AJUSTE_S3_PORT", 9100)
    with pytest.raises(PortTaken, match=r"e\.g\. AJUSTE_S3_PORT=\d+ make run$"):
        choose_port(s3, host="127.0.0.1", chosen=listening, taken=set(), notes=[])
