"""The OpenID Connect settings, read from the environment by controlpanel/settings.py.

No Django model is imported here (settings import it). A bad value stops start-up with the
variable's name, as every other setting does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_bool, env_int, env_str

ROLES = ("member", "manager")


@dataclass(frozen=True)
class GroupRule:
    """Members of `group` at the provider are given `role` in the project `project` (a slug)."""

    group: str
    project: str
    role: str


def parse_group_mapping(text: str, *, name: str = "OIDC_GROUP_MAPPING") -> tuple[GroupRule, ...]:
    """`GROUP=PROJECT:ROLE` entries, comma-separated (or one per line); a group may map to
    several projects. The group is what is left of the last `=` (Keycloak's `/org/ml-team`
    works)."""
    rules = []
    for raw in text.replace("\n", ",").split(","):
        entry = raw.strip()
        if not entry:
            continue
        group, sep, target = entry.rpartition("=")
        project, colon, role = target.partition(":")
        group, project, role = group.strip(), project.strip(), role.strip()
        if colon and not role:
            raise ImproperlyConfigured(f"{name}: {entry!r} names no role after ':'.")
        role = role or "member"
        if not sep or not group or not project:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not GROUP=PROJECT:ROLE (e.g. ml-team=vision:member)."
            )
        if role not in ROLES:
            raise ImproperlyConfigured(
                f"{name}: the role in {entry!r} is {role!r}; use member or manager."
            )
        rules.append(GroupRule(group=group, project=project, role=role))
    return tuple(rules)


def read_oidc_settings() -> dict[str, Any]:
    """Every OIDC_* setting, checked. OIDC_ISSUER empty: single sign-on is off."""
    issuer = (env_str("OIDC_ISSUER") or "").strip().rstrip("/")
    discovery = (env_str("OIDC_DISCOVERY_URL") or "").strip()
    if discovery and not issuer:
        raise ImproperlyConfigured(
            "OIDC_DISCOVERY_URL is set: set OIDC_ISSUER too (the ID tokens' `iss`)."
        )
    for name, url in (("OIDC_ISSUER", issuer), ("OIDC_DISCOVERY_URL", discovery)):
        if url and not url.startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"{name}={url!r} must be an https:// URL.")
    client_id = (env_str("OIDC_CLIENT_ID") or "").strip()
    secret = env_str("OIDC_CLIENT_SECRET") or ""
    if issuer and not client_id:
        raise ImproperlyConfigured("OIDC_ISSUER is set: set OIDC_CLIENT_ID too.")
    scopes = (env_str("OIDC_SCOPES") or "openid email profile").replace(",", " ").split()
    if "openid" not in scopes:
        scopes.insert(0, "openid")
    only = env_bool("OIDC_ONLY", False)
    if only and not issuer:
        raise ImproperlyConfigured("OIDC_ONLY=1 turns passwords off: set OIDC_ISSUER too.")
    if env_bool("OIDC_TRUST_EMAIL", False):
        raise ImproperlyConfigured(
            "OIDC_TRUST_EMAIL is retired: a sign-in is never joined to an account by its "
            "address any more, and only an address the provider says is verified is kept. "
            "Unset it (an existing account connects its identity from its Settings page)."
        )
    return {
        "OIDC_ISSUER": issuer,
        "OIDC_DISCOVERY_URL": discovery
        or (f"{issuer}/.well-known/openid-configuration" if issuer else ""),
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": secret,
        "OIDC_SCOPES": " ".join(dict.fromkeys(scopes)),
        "OIDC_GROUPS_CLAIM": (env_str("OIDC_GROUPS_CLAIM") or "groups").strip(),
        "OIDC_GROUP_MAPPING": parse_group_mapping(env_str("OIDC_GROUP_MAPPING") or ""),
        "OIDC_USERNAME_CLAIM": (env_str("OIDC_USERNAME_CLAIM") or "preferred_username").strip(),
        "OIDC_PROVIDER_NAME": (env_str("OIDC_PROVIDER_NAME") or "single sign-on").strip(),
        "OIDC_ONLY": only,
        "OIDC_TIMEOUT_SECONDS": env_int("OIDC_TIMEOUT_SECONDS", 10, minimum=1),
    }
