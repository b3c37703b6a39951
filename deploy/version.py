"""Ajuste's version: the one place it is written. The images are tagged with it (`make images`),
the default image names below carry it, and pyproject.toml reads it.

A release is the commit tagged `v<VERSION>` (TAG): pushing that tag runs the release workflow
(.github/workflows/release.yml), which refuses a tag that differs from VERSION or a version
CHANGELOG.md has no section for, then builds and pushes the images for amd64 and arm64.
`k8s/kustomization.yaml` names the same version (a test keeps them equal), and
`scripts/release-snapshot VERSION` records what the release leaves for the next one's
compatibility test (tests/release/<version>/). docs/images.md, "Releasing", has the steps."""

VERSION = "0.1.0"
TAG = f"v{VERSION}"
REGISTRY = "ghcr.io/ajuste"
