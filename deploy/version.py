"""Ajuste's version: the one place it is written. The images are tagged with it (`make images`),
the default image names below carry it, and pyproject.toml reads it."""

VERSION = "0.1.0"
REGISTRY = "ghcr.io/ajuste"
