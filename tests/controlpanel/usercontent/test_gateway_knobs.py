"""The gateway's entry point (images/gateway/ajuste-gateway) renders its throttling knobs into
nginx's configuration and refuses bad ones before nginx starts (issue 25). Run without nginx on
PATH, so that it stops right after rendering; the throttling itself is test_gateway_limits.py
(slow: the real nginx)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.controlpanel.usercontent.gateway import ENTRY, TEMPLATE


def render(tmp_path: Path, **knobs: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",  # envsubst, awk, mkdir; not /usr/sbin's nginx
        "AJUSTE_PANEL_URL": "http://panel.test",
        "AJUSTE_GATEWAY_RESOLVER": "127.0.0.1",
        "AJUSTE_GATEWAY_RUN_DIR": str(tmp_path),
        "AJUSTE_GATEWAY_TEMPLATE": str(TEMPLATE),
        **knobs,
    }
    return subprocess.run(["sh", str(ENTRY)], env=env, capture_output=True, text=True, timeout=30)


def test_defaults_and_knobs_are_rendered(tmp_path: Path) -> None:
    render(tmp_path)
    conf = (tmp_path / "nginx.conf").read_text()
    assert "zone=ajuste_address:10m rate=100r/s;" in conf
    assert "zone=ajuste_key:10m rate=50r/s;" in conf
    assert "zone=ajuste_signin:10m rate=60r/m;" in conf
    assert "limit_req zone=ajuste_address burst=400 nodelay;" in conf
    assert "set_real_ip_from" not in conf  # the connection's address by default
    assert 'proxy_cache_key "$http_host|$http_authorization|$http_cookie|' in conf
    render(
        tmp_path,
        AJUSTE_GATEWAY_RATE="7",
        AJUSTE_GATEWAY_KEY_BURST="9",
        AJUSTE_GATEWAY_REAL_IP_FROM="10.0.0.0/8 fd00::/8",
    )
    conf = (tmp_path / "nginx.conf").read_text()
    assert "rate=7r/s;" in conf and "limit_req zone=ajuste_key burst=9 nodelay;" in conf
    assert "set_real_ip_from 10.0.0.0/8;" in conf and "set_real_ip_from fd00::/8;" in conf
    assert "real_ip_header X-Forwarded-For;" in conf


@pytest.mark.parametrize(
    ("knob", "value", "said"),
    [
        ("AJUSTE_GATEWAY_RATE", "0", "AJUSTE_GATEWAY_RATE=0: a whole number above 0"),
        ("AJUSTE_GATEWAY_BURST", "10r", "AJUSTE_GATEWAY_BURST=10r: a whole number above 0"),
        ("AJUSTE_GATEWAY_SIGNIN_RATE", "-1", "AJUSTE_GATEWAY_SIGNIN_RATE=-1: a whole number"),
        (
            "AJUSTE_GATEWAY_REAL_IP_FROM",
            "10.0.0.0/8; return 200",
            "AJUSTE_GATEWAY_REAL_IP_FROM: 10.0.0.0/8; is not an address or CIDR",
        ),
    ],
)
def test_a_bad_knob_stops_the_start_naming_itself(
    tmp_path: Path, knob: str, value: str, said: str
) -> None:
    done = render(tmp_path, **{knob: value})
    assert done.returncode == 2 and said in done.stderr
    assert not (tmp_path / "nginx.conf").exists()
