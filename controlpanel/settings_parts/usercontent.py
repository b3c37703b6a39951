"""User content: the hosts notebooks and apps are served on, and the gateway's throttling."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_int, env_str
from controlpanel.settings_parts.compute import COMPUTE_BACKEND
from controlpanel.settings_parts.site import SITE_URL
from controlpanel.usercontent.domain import parse_content_domain

__all__ = [
    "AJUSTE_GATEWAY_BURST",
    "AJUSTE_GATEWAY_KEY_BURST",
    "AJUSTE_GATEWAY_KEY_RATE",
    "AJUSTE_GATEWAY_RATE",
    "AJUSTE_GATEWAY_SIGNIN_BURST",
    "AJUSTE_GATEWAY_SIGNIN_RATE",
    "USER_CONTENT_CACHE_SECONDS",
    "USER_CONTENT_DOMAIN",
    "USER_CONTENT_SESSION_SECONDS",
    "USER_CONTENT_TICKET_SECONDS",
]

# User content (DESIGN.md rule 17): every notebook and app on a host of its own under
# USER_CONTENT_DOMAIN (`nb-<id>.<domain>`), never on the panel's; on a cluster behind the
# user-content gateway (images/gateway), under `make run` proxied by the panel itself on its own
# port (`localhost:<port>`: browsers resolve *.localhost to loopback). Required on a cluster
# (system check ajuste.E110). A ticket of Open is good for TICKET_SECONDS, the host's cookie
# for SESSION_SECONDS; the gateway keeps a notebook's yes for CACHE_SECONDS (the bound on
# how long a removed member, a logged-out session or a stopped notebook still gets through).
try:
    _site_port = urlsplit(SITE_URL).port
    _content_domain = env_str("USER_CONTENT_DOMAIN") or (
        f"localhost{f':{_site_port}' if _site_port else ''}" if COMPUTE_BACKEND == "local" else ""
    )
    USER_CONTENT_DOMAIN = parse_content_domain(_content_domain) if _content_domain else None
except ValueError as exc:
    raise ImproperlyConfigured(f"USER_CONTENT_DOMAIN: {exc}") from None
USER_CONTENT_TICKET_SECONDS = env_int("USER_CONTENT_TICKET_SECONDS", 60, minimum=5)
USER_CONTENT_SESSION_SECONDS = env_int("USER_CONTENT_SESSION_SECONDS", 43200, minimum=60)
USER_CONTENT_CACHE_SECONDS = env_int("USER_CONTENT_CACHE_SECONDS", 5, minimum=0)
# The user-content gateway's throttling (images/gateway/ajuste-gateway: the same names and
# defaults), kept by the panel's own proxy under `make run` (controlpanel/usercontent/throttle.py):
# requests a second per client address and the burst above it, the same per Authorization
# header, and ticket exchanges a minute per address.
AJUSTE_GATEWAY_RATE = env_int("AJUSTE_GATEWAY_RATE", 100, minimum=1)
AJUSTE_GATEWAY_BURST = env_int("AJUSTE_GATEWAY_BURST", 400, minimum=1)
AJUSTE_GATEWAY_KEY_RATE = env_int("AJUSTE_GATEWAY_KEY_RATE", 50, minimum=1)
AJUSTE_GATEWAY_KEY_BURST = env_int("AJUSTE_GATEWAY_KEY_BURST", 200, minimum=1)
AJUSTE_GATEWAY_SIGNIN_RATE = env_int("AJUSTE_GATEWAY_SIGNIN_RATE", 60, minimum=1)
AJUSTE_GATEWAY_SIGNIN_BURST = env_int("AJUSTE_GATEWAY_SIGNIN_BURST", 30, minimum=1)
# Ingresses of their own with ingress-nginx's forward-auth served notebooks and apps before the
# gateway did: their settings say nothing any more, and a value left set is refused.
for _retired in (
    "NOTEBOOK_HOST", "NOTEBOOK_AUTH_URL", "NOTEBOOK_TLS_SECRET", "NOTEBOOK_INGRESS_CLASS",
    "APP_HOST", "APP_AUTH_URL", "APP_TLS_SECRET", "APP_INGRESS_CLASS",
    "KUBERNETES_INGRESS_NAMESPACE",
):  # fmt: skip
    if env_str(_retired):
        raise ImproperlyConfigured(
            f"{_retired} is retired: notebooks and apps are served by the user-content gateway "
            "on hosts under USER_CONTENT_DOMAIN (README: Configuration)."
        )
