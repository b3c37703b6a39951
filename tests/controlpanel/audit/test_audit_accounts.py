"""Events issue 25 found unaudited, each recorded through its real page, API or service with
who acted and never a secret: project secrets and the job webhook, invitation acceptance.
(Password resets, account creation and reactivation: tests/controlpanel/people/test_people.py;
SSO connections and group-mapping changes: tests/controlpanel/people/test_sso_linking.py and
test_oidc.py.)"""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from controlpanel.audit.models import AuditEvent
from controlpanel.projects.models import Project
from tests.fixtures.panel import UserFactory, api_client_for, logged_in

HOOK = "https://hooks.example.com/services/T0001/B0002/" + "k" * 24


def _events(prefix: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    rows = AuditEvent.objects.filter(action__startswith=prefix).order_by("pk")
    return [(e.action, e.actor_username, e.project_slug, e.details) for e in rows]


def test_secrets_set_replaced_and_deleted_are_audited_without_their_value(
    owner: Any, owner_client: Client, project: Project
) -> None:
    owner_client.post("/p/alpha/secrets/", {"action": "set", "name": "HF_TOKEN", "value": "v1-xyz"})
    api = api_client_for(owner)
    api.post("/api/v1/projects/alpha/secrets/", {"name": "HF_TOKEN", "value": "v2-xyz"})
    api.delete("/api/v1/projects/alpha/secrets/HF_TOKEN/")
    assert _events("secret.") == [
        ("secret.set", "owner", "alpha", {"name": "HF_TOKEN", "replaced": False}),
        ("secret.set", "owner", "alpha", {"name": "HF_TOKEN", "replaced": True}),
        ("secret.delete", "owner", "alpha", {"name": "HF_TOKEN"}),
    ]
    assert not [e for e in AuditEvent.objects.all() if "-xyz" in str(e.details)]


def test_webhook_changes_are_audited_without_the_url_path_or_the_secret(
    owner_client: Client, project: Project
) -> None:
    """A Slack or Teams webhook URL carries its own secret in the path: only the host is kept."""
    owner_client.post("/p/alpha/settings/", {"action": "webhook-save", "webhook_url": HOOK})
    owner_client.post("/p/alpha/settings/", {"action": "webhook-rotate"})
    owner_client.post("/p/alpha/settings/", {"action": "webhook-save", "webhook_url": ""})
    assert _events("webhook.") == [
        ("webhook.set", "owner", "alpha", {"host": "hooks.example.com"}),
        ("webhook.rotate", "owner", "alpha", {}),
        ("webhook.set", "owner", "alpha", {"host": ""}),
    ]
    project.refresh_from_db()
    for event in AuditEvent.objects.all():
        assert "k" * 24 not in str(event.details)


def test_an_accepted_invitation_is_audited_with_who_accepted(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    owner_client.post("/p/alpha/members/invite/", {"email": "ida@example.com", "role": "manager"})
    link = re.search(r"http://\S+(/invite/\S+/)", mailoutbox[0].body)
    assert link
    ida = UserFactory(username="ida", email="ida@example.com")
    logged_in(ida).post(link.group(1), {"action": "join"})
    accepted = AuditEvent.objects.get(action="invitation.accept")
    assert (accepted.actor, accepted.project, accepted.details) == (
        ida,
        project,
        {"email": "ida@example.com", "role": "manager", "user": "ida"},
    )
    raw = link.group(1).split("/")[2]
    assert raw not in str(accepted.details)
