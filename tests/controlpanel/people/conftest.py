"""These tests make and reactivate accounts: the panel runs them as a deployment whose
operator accepts one trust domain (AJUSTE_LOCAL_BACKEND_TRUSTED=1), since the tests' default
backend is the local one. The tests of the local backend's guard turn it off themselves."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _trusted_local_backend(settings: Any) -> None:
    settings.AJUSTE_LOCAL_BACKEND_TRUSTED = True
