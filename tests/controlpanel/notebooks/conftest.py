"""Fixtures of the notebooks kind's tests."""

from tests.fixtures.editors import editor_servers  # noqa: F401 (a fixture)
