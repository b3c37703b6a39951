"""The ports `make run` listens on: the wanted one when it is free; else, when the user did not
choose it, the next free one (said once at start); when they chose it, a refusal that says how
to choose another."""

from __future__ import annotations

import socket
from dataclasses import dataclass

SCAN = 50  # ports tried after the wanted one


class PortTaken(SystemExit):
    """A port the user chose is taken: `make run` stops with the message."""


@dataclass(frozen=True)
class Port:
    """One listening port to choose: what it is for and the variable that chooses it."""

    what: str
    variable: str
    default: int


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen there now (a port in TIME_WAIT is free, as for servers)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(
    port: Port, *, host: str, chosen: int | None, taken: set[int], notes: list[str]
) -> int:
    """The port to use; `chosen` is the user's (from `port.variable`), `taken` those already
    given to another of our servers. A note is added to `notes` when the default moved: make
    run says them once the start may go on (a refusal, ajuste.E001, is said first and alone)."""
    if chosen is not None:
        if chosen in taken or not port_free(host, chosen):
            raise PortTaken(
                f"make run: port {chosen} ({port.variable}, {port.what}) is taken by another "
                f"program: stop it, or choose another port, e.g. {port.variable}="
                f"{_example(port, host, chosen)} make run"
            )
        return chosen
    for candidate in range(port.default, port.default + SCAN + 1):
        if candidate not in taken and port_free(host, candidate):
            if candidate != port.default:
                notes.append(
                    f"• port {port.default} is taken: port {candidate} for {port.what} "
                    f"({port.variable} chooses another)"
                )
            return candidate
    raise PortTaken(
        f"make run: ports {port.default}-{port.default + SCAN} are all taken: choose one with "
        f"{port.variable}"
    )


def _example(port: Port, host: str, chosen: int) -> str:
    free = next((p for p in range(chosen + 1, chosen + SCAN) if port_free(host, p)), chosen + 1)
    return f"{host}:{free}" if port.variable == "AJUSTE_BIND" else str(free)
