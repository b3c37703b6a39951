"""Every answer under /api/ is JSON, failures included: unrouted paths (404), methods a route
does not take (405), server errors (500), and out-of-range `?limit=` / `?offset=` (400 naming
the parameter, where a huge limit used to reach the database and answer an HTML 500)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.api.pagination import MAX_LIMIT

pytestmark = pytest.mark.django_db

LISTS = ["/api/v1/projects/", "/api/v1/jobs/", "/api/v1/buckets/", "/api/v1/tokens/"]


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(
    ("query", "name", "shown"),
    [
        ("limit=24719174555323113472", "limit", "'24719174555323113472'"),
        ("limit=0", "limit", "'0'"),
        ("limit=-1", "limit", "'-1'"),
        ("limit=1001", "limit", "'1001'"),
        ("limit=ten", "limit", "'ten'"),
        ("limit=" + "9" * 5000, "limit", "'" + "9" * 24 + "…'"),
        ("offset=99999999999999999999999", "offset", "'99999999999999999999999'"),
        ("offset=-5", "offset", "'-5'"),
        ("offset=%C2%B2", "offset", "'²'"),  # a digit to str.isdigit(), not to int()
    ],
)
def test_a_bad_limit_or_offset_is_a_400_naming_it(
    owner_api: APIClient, path: str, query: str, name: str, shown: str
) -> None:
    response = owner_api.get(f"{path}?project=alpha&{query}")
    assert response.status_code == 400, response.content
    low = 1 if name == "limit" else 0
    high = MAX_LIMIT if name == "limit" else 2**31 - 1
    assert response.json() == {name: [f"Give a whole number from {low} to {high}, not {shown}."]}


def test_limits_in_range_page_through(owner_api: APIClient, owner: Any) -> None:
    for index in range(3):
        owner_api.post("/api/v1/tokens/", {"name": f"t{index}"}, format="json")
    first = owner_api.get("/api/v1/tokens/?limit=2").json()
    assert (first["count"], len(first["results"]), first["previous"]) == (4, 2, None)
    second = owner_api.get(first["next"]).json()
    assert (len(second["results"]), second["next"]) == (2, None)
    assert owner_api.get(f"/api/v1/tokens/?limit={MAX_LIMIT}&offset=").json()["count"] == 4
    assert owner_api.get("/api/v1/tokens/?offset=2147483647").json()["results"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs/%C2%84/",
        "/api/v1/nothing-here/",
        "/api/v2/",
        "/api/",
        "/api/v1/buckets/LOCAL/",
        "/api/v1/projects/UPPER/",
    ],
)
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_an_unrouted_api_path_is_a_json_404(owner_api: APIClient, method: str, path: str) -> None:
    response = getattr(owner_api, method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found: no API route has this path."}


def test_anonymous_gets_the_same_json_404(client: Any) -> None:
    response = client.post("/api/v1/jobs/%C2%84/")  # no CSRF token, no login: still 404
    assert (response.status_code, response.json()["detail"][:10]) == (404, "Not found:")


def test_a_missing_trailing_slash_still_redirects(owner_api: APIClient) -> None:
    response = owner_api.get("/api/v1/me?x=1")
    assert (response.status_code, response["Location"]) == (301, "/api/v1/me/?x=1")
    assert owner_api.get("/api/v1/me/").json()["username"] == "owner"


def test_a_method_a_route_does_not_take_is_a_json_405(owner_api: APIClient) -> None:
    response = owner_api.put("/api/v1/me/", {}, format="json")
    assert response.status_code == 405
    assert response.json() == {"detail": 'Method "PUT" not allowed.'}


def test_a_server_error_is_json(
    owner: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from controlpanel.jobs import selectors

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(selectors, "jobs_for_project", broken)
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(owner)
    response = api.get("/api/v1/jobs/?project=alpha")
    assert response.status_code == 500
    assert response.json() == {"detail": "Server error: the failure is in the server's log."}
    [record] = [r for r in caplog.records if r.name == "controlpanel.api.errors"]
    assert record.exc_info and "a bug" in str(record.exc_info[1])
    strict = APIClient()  # Django's got_request_exception is still sent: tests see the bug
    strict.force_authenticate(owner)
    with pytest.raises(RuntimeError, match="a bug"):
        strict.get("/api/v1/jobs/?project=alpha")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "after=99999999999999999999999",
            {"after": ["Give a whole number from 0 to 2147483647, not '99999999999999999999999'."]},
        ),
        ("after=-5", {"after": ["Give a whole number from 0 to 2147483647, not '-5'."]}),
        ("after=abc", {"after": ["Give a whole number from 0 to 2147483647, not 'abc'."]}),
        ("limit=0", {"limit": ["Give a whole number from 1 to 5000, not '0'."]}),
        (
            "limit=99999999999999999999",
            {"limit": ["Give a whole number from 1 to 5000, not '99999999999999999999'."]},
        ),
    ],
)
def test_log_paging_parameters_out_of_range_are_a_400(
    owner_api: APIClient, project: Any, owner: Any, query: str, message: dict[str, list[str]]
) -> None:
    """They used to be echoed back (`"next": 99999999999999999999999`) or silently replaced."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job

    job = Job.objects.create(
        project=project,
        owner=owner,
        name="j",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    response = owner_api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha&{query}")
    assert (response.status_code, response.json()) == (400, message)


# Found by the API fuzzer (tests/controlpanel/test_api_fuzz.py): PostgreSQL stores no NUL in
# text, and a NUL that reached a query answered a 500.
@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/notebooks/"])
def test_a_nul_in_a_flavor_name_is_a_keyed_400(owner_api: APIClient, path: str) -> None:
    from controlpanel.jobs.models import Job
    from controlpanel.notebooks.models import Notebook

    body = {"flavor": "ai1-1-cpu\x00", "image": "x/y:1"}
    response = owner_api.post(f"{path}?project=alpha", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["flavor"] == [
        "Unknown flavor 'ai1-1-cpu\\x00'; `ajuste flavor list` shows them."
    ]
    assert not Job.objects.exists() and not Notebook.objects.exists()


def test_a_nul_that_reaches_the_database_elsewhere_is_a_400(owner_api: APIClient) -> None:
    response = owner_api.get("/api/v1/jobs/", {"project": "alpha\x00"})
    assert response.status_code == 400, response.content
    assert response.json() == {"detail": "Text may not contain the NUL character (\\u0000)."}


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/notebooks/"])
def test_a_body_that_is_not_json_answers_as_the_schema_says(
    owner_api: APIClient, path: str
) -> None:
    """The 400 of a submission was declared as messages by key only; a body that is not JSON
    answers `{"detail": "JSON parse error ..."}`, which the schema now declares too."""
    from tests.controlpanel.test_api_schema import Schema

    url = f"{path}?project=alpha"
    schema = Schema(owner_api.get("/api/schema/?format=json").json())
    response = owner_api.post(url, b"not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    schema.check("post", url, response)
