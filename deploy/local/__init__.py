"""The local backend: workloads as supervised processes on this machine (`make run`)."""

from deploy.local.backend import LocalBackend

__all__ = ["LocalBackend"]
