"""USER_CONTENT_DOMAIN's grammar, each workload's host, and which domains share cookies with
the panel's host."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from controlpanel.usercontent.domain import ContentDomain, cookie_overlap, parse_content_domain
from controlpanel.usercontent.hosts import content_host, is_content_host, parse_host

ID = uuid.UUID("5f0c1e2d-3c4b-4a59-8687-96a5b4c3d2e1")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("usercontent.example.com", ContentDomain("usercontent.example.com")),
        ("UserContent.Example.COM.", ContentDomain("usercontent.example.com")),
        ("localhost:8000", ContentDomain("localhost", 8000)),
        ("a-1.b", ContentDomain("a-1.b")),
    ],
)
def test_a_domain_and_its_port(value: str, parsed: ContentDomain) -> None:
    assert parse_content_domain(value) == parsed


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("https://uc.example.com", "no scheme or path"),
        ("uc.example.com/x", "no scheme or path"),
        ("*.uc.example.com", "without '*.'"),
        ("10.0.0.1", "an IP address has no subdomains"),
        ("uc_example.com", "not a DNS name"),
        ("-uc.example.com", "not a DNS name"),
        ("uc..example.com", "not a DNS name"),
        ("uc.example.com:0", "port must be a number from 1 to 65535"),
        ("uc.example.com:http", "port must be a number from 1 to 65535"),
        ("x" * 64 + ".com", "not a DNS name"),
    ],
)
def test_a_bad_domain_is_refused_saying_why(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=r".*") as refused:
        parse_content_domain(value)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("panel", "content", "shares"),
    [
        ("ajuste.example.com", "ajuste.example.com", "is the panel's own host"),
        ("ajuste.example.com", "example.com", "lies inside USER_CONTENT_DOMAIN"),
        ("example.com", "uc.example.com", "lies inside the panel's host"),
        ("ajuste.example.com", "uc.ajuste.example.com", "lies inside the panel's host"),
        ("ajuste.example.com", "usercontent.example.net", ""),
        ("ajuste.example.com", "uc.example.com", ""),  # siblings: host-only cookies stay apart
        ("127.0.0.1", "localhost", ""),
        ("*", "uc.example.com", ""),
    ],
)
def test_which_domains_share_cookies_with_the_panel(panel: str, content: str, shares: str) -> None:
    said = cookie_overlap(panel_host=panel, content=parse_content_domain(content))
    assert (shares in said) if shares else said == ""


def test_each_workload_has_one_host_named_from_its_id(settings: Any) -> None:
    settings.USER_CONTENT_DOMAIN = parse_content_domain("uc.example.com")
    settings.HTTPS = True
    host = content_host("nb", ID)
    assert host.label == "nb-5f0c1e2d3c4b4a59868796a5b4c3d2e1"
    assert len(host.label) <= 63
    assert host.origin == "https://nb-5f0c1e2d3c4b4a59868796a5b4c3d2e1.uc.example.com"
    assert parse_host("nb-5f0c1e2d3c4b4a59868796a5b4c3d2e1.uc.example.com") == host
    assert parse_host("NB-5F0C1E2D3C4B4A59868796A5B4C3D2E1.UC.EXAMPLE.COM:443") == host
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    assert content_host("app", ID).netloc == f"app-{ID.hex}.localhost:8000"
    assert parse_host(f"app-{ID.hex}.localhost:8000") == content_host("app", ID)


@pytest.mark.parametrize(
    "header",
    [
        f"nb-{ID.hex}.localhost:8001",  # another port: another origin
        f"nb-{ID.hex}.evil.localhost:8000",
        f"x.nb-{ID.hex}.localhost:8000",
        f"nb-{ID.hex[:-1]}.localhost:8000",
        f"nb-{ID.hex}g.localhost:8000",
        "localhost:8000",
        "127.0.0.1:8000",
        f"nb-{ID.hex}.localhost:80x",
    ],
)
def test_no_other_host_names_a_workload(header: str, settings: Any) -> None:
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    assert parse_host(header) is None


def test_the_panels_hosts_are_no_content_hosts(settings: Any) -> None:
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    assert not is_content_host("127.0.0.1:8000")
    assert not is_content_host("localhost:8000")
    assert is_content_host("anything.localhost:8000")
    settings.USER_CONTENT_DOMAIN = None
    assert not is_content_host("anything.localhost:8000")
    assert parse_host(f"nb-{ID.hex}.localhost:8000") is None
