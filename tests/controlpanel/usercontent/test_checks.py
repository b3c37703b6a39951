"""On a cluster the panel refuses to start without a user-content domain of its own (system check
ajuste.E110: every management command, `check --deploy` included, and gunicorn's wsgi.py);
a session or CSRF cookie Domain covering the content hosts is refused on every backend."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from controlpanel.usercontent.checks import user_content_domain_check
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.test_settings import ROOT


@pytest.fixture
def on_a_cluster(settings: Any) -> Any:
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.SITE_URL = "https://ajuste.example.com"
    settings.ALLOWED_HOSTS = ["ajuste.example.com"]
    settings.USER_CONTENT_DOMAIN = parse_content_domain("usercontent.example.net")
    return settings


def said(settings: Any) -> list[str]:
    return [error.msg for error in user_content_domain_check()]


@pytest.mark.parametrize(
    ("domain", "why"),
    [
        (None, "USER_CONTENT_DOMAIN is not set"),
        ("ajuste.example.com", "is the panel's own host"),
        ("example.com", "lies inside USER_CONTENT_DOMAIN"),
        ("nb.ajuste.example.com", "lies inside the panel's host"),
    ],
)
def test_a_cluster_refuses_content_the_panels_cookies_could_reach(
    on_a_cluster: Any, domain: str | None, why: str
) -> None:
    on_a_cluster.USER_CONTENT_DOMAIN = parse_content_domain(domain) if domain else None
    (error,) = user_content_domain_check()
    assert error.id == "ajuste.E110" and why in error.msg
    assert "USER_CONTENT_DOMAIN" in error.hint
    for args in (("check",), ("check", "--deploy")):
        with pytest.raises(SystemCheckError, match=r"ajuste\.E110"):
            call_command(*args)


def test_a_domain_of_its_own_starts(on_a_cluster: Any) -> None:
    assert said(on_a_cluster) == []
    on_a_cluster.USER_CONTENT_DOMAIN = parse_content_domain("uc.example.com")  # a sibling
    assert said(on_a_cluster) == []
    on_a_cluster.ALLOWED_HOSTS = ["ajuste.example.com", ".example.com"]  # every subdomain
    assert "lies inside the panel's host example.com" in said(on_a_cluster)[0]


def test_a_panel_cookie_domain_over_the_content_hosts_is_refused_everywhere(
    on_a_cluster: Any,
) -> None:
    on_a_cluster.USER_CONTENT_DOMAIN = parse_content_domain("uc.example.com")
    on_a_cluster.SESSION_COOKIE_DOMAIN = ".example.com"
    assert said(on_a_cluster) == [
        "SESSION_COOKIE_DOMAIN=example.com sends the panel's cookie to every content host."
    ]
    on_a_cluster.COMPUTE_BACKEND = "local"
    on_a_cluster.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    on_a_cluster.SESSION_COOKIE_DOMAIN = None
    on_a_cluster.CSRF_COOKIE_DOMAIN = "localhost"
    assert said(on_a_cluster) == [
        "CSRF_COOKIE_DOMAIN=localhost sends the panel's cookie to every content host."
    ]


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    dropped = {"DEBUG", "SECRET_KEY", "HTTPS", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    cluster = {
        "DEBUG": "1",
        "COMPUTE_BACKEND": "kubernetes",
        "ALLOWED_HOSTS": "ajuste.example.com",
        "SITE_URL": "https://ajuste.example.com",
    }
    return subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=base | cluster | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_web_process_and_the_settings_refuse_too() -> None:
    """gunicorn runs no system checks: loading the WSGI application refuses; a bad value is
    refused when the settings load, naming the variable."""
    refused = _run({}, "-c", "import controlpanel.wsgi")
    assert refused.returncode != 0 and "ajuste.E110" in refused.stderr
    assert "USER_CONTENT_DOMAIN is not set" in refused.stderr
    started = _run(
        {"USER_CONTENT_DOMAIN": "usercontent.example.net"}, "-c", "import controlpanel.wsgi"
    )
    assert started.returncode == 0, started.stderr
    bad = _run({"USER_CONTENT_DOMAIN": "https://uc.example.net"}, "manage.py", "check")
    assert bad.returncode != 0 and "USER_CONTENT_DOMAIN: " in bad.stderr
