"""API throttling per token and per user: rates parsed exactly from the settings (a bad one
stops start-up naming the variable), a 429 with Retry-After past the limit, counters in the
shared Redis cache, and the next window lets the caller through again."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.test import override_settings
from rest_framework.test import APIClient

from controlpanel.accounts.models import ApiToken, User
from controlpanel.accounts.services import token_create
from controlpanel.api.rates import Rate, parse_rate
from controlpanel.api.throttling import window_key
from tests.controlpanel.test_settings import _check
from tests.fixtures.panel import UserFactory, add_member, logged_in

ME = "/api/v1/me/"
DAY = Rate(count=3, seconds=86400)


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("1200/min", Rate(1200, 60)),
        ("20/s", Rate(20, 1)),
        ("5000/hour", Rate(5000, 3600)),
        ("5000/hours", Rate(5000, 3600)),
        ("100/10s", Rate(100, 10)),
        ("7/2minute", Rate(7, 120)),
        (" 3/DAY ", Rate(3, 86400)),
        ("off", None),
    ],
)
def test_rates_parse_exactly(text: str, rate: Rate | None) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    "text",
    ["", "1200", "1200/", "/min", "0/min", "1200/0s", "-1/min", "1.5/min", "1200/ min",
     "1200/fortnight", "1200/ss", "1200/hs", "1200/mins/s", "12 00/min", "1200/minute!",
     "1e3/min", "none"],
)  # fmt: skip
def test_anything_else_is_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"rate|at least 1"):
        parse_rate(text)


def test_a_bad_rate_stops_startup_naming_the_variable() -> None:
    result = _check({"DEBUG": "1", "API_THROTTLE_USER": "lots/min"})
    assert result.returncode != 0
    assert "API_THROTTLE_USER: 'lots/min' is not a rate" in result.stderr


def test_the_defaults_are_generous_and_the_counters_are_in_redis() -> None:
    assert parse_rate(settings.API_THROTTLE_TOKEN) == Rate(1200, 60)
    assert parse_rate(settings.API_THROTTLE_USER) == Rate(2400, 60)
    assert isinstance(caches["default"], RedisCache)


def _client(user: User, name: str = "t") -> tuple[APIClient, ApiToken]:
    token, raw = token_create(user=user, name=name)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client, token


def _assert_throttled(response: Any) -> None:
    assert response.status_code == 429, response.content
    retry_after = int(response["Retry-After"])
    # The window is the UTC day: the wait is what is left of it.
    left = math.ceil((time.time() // 86400 + 1) * 86400 - time.time())
    assert retry_after >= 1 and abs(retry_after - left) <= 2, (retry_after, left)
    assert response.json()["detail"].startswith("Request was throttled.")


@pytest.mark.django_db
@override_settings(API_THROTTLE_TOKEN="3/day", API_THROTTLE_USER="off")
def test_a_token_past_its_rate_gets_429_with_retry_after_then_passes_in_the_next_window(
    owner: User,
) -> None:
    client, token = _client(owner)
    other, _ = _client(owner, "other")
    assert [client.get(ME).status_code for _ in range(3)] == [200, 200, 200]
    _assert_throttled(client.get(ME))
    _assert_throttled(client.post("/api/v1/tokens/", {"name": "x"}, format="json"))
    assert ApiToken.objects.filter(user=owner).count() == 2  # the refused call made nothing
    # Per token: the same user's other token and browser session are not held back.
    assert other.get(ME).status_code == 200
    assert logged_in(owner).get(ME).status_code == 200
    # The next window (its key) starts from nothing.
    cache.delete(window_key("token", token.pk, DAY, time.time()))
    assert client.get(ME).status_code == 200


@pytest.mark.django_db
@override_settings(API_THROTTLE_TOKEN="off", API_THROTTLE_USER="3/day")
def test_a_user_is_counted_over_all_their_tokens_and_their_session(
    owner: User, project: Any
) -> None:
    first, _ = _client(owner)
    second, _ = _client(owner, "second")
    session = logged_in(owner)
    assert first.get(ME).status_code == 200
    assert second.get(ME).status_code == 200
    assert session.get(ME).status_code == 200
    _assert_throttled(first.get(ME))
    _assert_throttled(second.get(ME))
    _assert_throttled(session.get(ME))
    # Another user has their own count; an anonymous caller is refused as before, uncounted.
    colleague = UserFactory(username="colleague")
    add_member(project, colleague)
    assert _client(colleague)[0].get(ME).status_code == 200
    assert APIClient().get(ME).status_code == 401
    cache.delete(window_key("user", owner.pk, DAY, time.time()))
    assert first.get(ME).status_code == 200


@pytest.mark.django_db
@override_settings(API_THROTTLE_TOKEN="3/day", API_THROTTLE_USER="off")
def test_the_count_is_shared_with_every_process_through_the_cache(owner: User) -> None:
    """Another web process counts in the same Redis key: a window it filled refuses here."""
    client, token = _client(owner)
    cache.set(window_key("token", token.pk, DAY, time.time()), 3, timeout=86400)
    _assert_throttled(client.get(ME))
    cache.delete(window_key("token", token.pk, DAY, time.time()))
    assert client.get(ME).status_code == 200


@pytest.mark.django_db
@override_settings(API_THROTTLE_TOKEN="5/day", API_THROTTLE_USER="3/day")
def test_with_both_limits_on_the_users_window_refuses_though_each_token_is_under_its_own(
    owner: User,
) -> None:
    """Both windows are counted at every request (one round trip, #27): the user's, filled by
    another process or by the user's other tokens, refuses a token still under its own limit,
    and the refused request still counts against that token."""
    first, first_token = _client(owner)
    second, _ = _client(owner, "second")
    cache.set(window_key("user", owner.pk, DAY, time.time()), 1, timeout=86400)
    assert first.get(ME).status_code == 200
    assert second.get(ME).status_code == 200
    _assert_throttled(first.get(ME))
    assert cache.get(window_key("token", first_token.pk, DAY, time.time())) == 2
    cache.delete(window_key("user", owner.pk, DAY, time.time()))
    assert first.get(ME).status_code == 200
