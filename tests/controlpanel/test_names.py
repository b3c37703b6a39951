"""Names others read refuse characters that hide or reorder text (Unicode Cc, Cf, Zl, Zp):
a project, a job or a token named with a right-to-left override or a zero-width space looks
like another one."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.accounts.models import ApiToken, User
from controlpanel.core.validators import validate_visible_name
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.fixtures.panel import api_client_for

SPOOFS = [
    ("invoice\u202etxt.exe", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    ("ad\u200bmin", "U+200B (ZERO WIDTH SPACE)"),
    ("team\u2066a\u2069", "U+2066 (LEFT-TO-RIGHT ISOLATE), U+2069 (POP DIRECTIONAL ISOLATE)"),
    ("line\u2028break", "U+2028 (LINE SEPARATOR)"),
    ("para\u2029graph", "U+2029 (PARAGRAPH SEPARATOR)"),
    ("next\x85line", "U+0085 (a control character)"),  # C1
    ("bell\x07", "U+0007 (a control character)"),
    ("\ufeffbom", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
]


@pytest.mark.parametrize(("name", "named"), SPOOFS)
def test_project_names_refuse_hidden_characters(admin_user: User, name: str, named: str) -> None:
    api = api_client_for(admin_user)
    response = api.post("/api/v1/projects/", {"slug": "spoof", "name": name}, format="json")
    assert response.status_code == 400
    assert response.json()["name"] == [f"Remove the invisible or control characters: {named}."]
    assert not Project.objects.filter(slug="spoof").exists()


@pytest.mark.parametrize(("name", "named"), SPOOFS[:3])
def test_job_and_token_names_refuse_hidden_characters(
    owner_api: APIClient, owner_client: Client, owner: User, name: str, named: str
) -> None:
    message = f"Remove the invisible or control characters: {named}."
    job = {"name": name, "image": "x/y:1", "command": ["python", "t.py"], "flavor": "ai1-1-cpu"}
    response = owner_api.post("/api/v1/jobs/?project=alpha", job, format="json")
    assert (response.status_code, response.json().get("name")) == (400, [message])
    assert not Job.objects.exists()
    token = owner_api.post("/api/v1/tokens/", {"name": name}, format="json")
    assert (token.status_code, token.json()["name"]) == (400, [message])
    page = owner_client.post("/settings/", {"name": name})
    assert page.status_code == 400 and message in page.content.decode()
    assert list(ApiToken.objects.filter(user=owner).values_list("name", flat=True)) == ["tests"]


@pytest.mark.parametrize("name", ["Équipe ü", "日本語チーム", "emoji 🚀 team", "tab-free a b"])
def test_ordinary_names_in_any_script_pass(name: str) -> None:
    validate_visible_name(name)


def test_project_page_form_says_so(admin_user: User, settings: Any) -> None:
    from tests.fixtures.panel import logged_in

    response = logged_in(admin_user).post(
        "/projects/new/",
        {
            "name": "x\u202ey",
            "slug": "spoof",
            "gpu_quota": 1,
            "monthly_budget": 0,
            "notebook_idle_minutes": 0,
        },
    )
    assert response.status_code in (200, 400)
    assert "U+202E (RIGHT-TO-LEFT OVERRIDE)" in response.content.decode()
    assert not Project.objects.filter(slug="spoof").exists()
