"""The Kubernetes backend: the official client, built once by `make_api_client`; `api` is the
only module that calls the API."""

from deploy.kubernetes.backend import KubernetesBackend
from deploy.kubernetes.client import make_api_client

__all__ = ["KubernetesBackend", "make_api_client"]
