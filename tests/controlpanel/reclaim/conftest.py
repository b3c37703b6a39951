"""Fixtures of the idle GPU tests."""

from tests.fixtures.prometheus import dcgm  # noqa: F401 (a fixture)
