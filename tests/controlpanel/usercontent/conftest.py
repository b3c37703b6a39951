from collections.abc import Iterator

import pytest

from tests.controlpanel.usercontent.standin import StandIn, start_standin


@pytest.fixture
def standin() -> Iterator[StandIn]:
    """A user's server on loopback that records what it receives."""
    state, server = start_standin()
    yield state
    server.shutdown()
    server.server_close()
