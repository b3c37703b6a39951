"""`make run`'s mail (#32): each message sent is a file under var/mail/, readable by its owner
only, where a person finds it (it used to go to the web process's console among access-log
lines); an invitation's link read from it works."""

from __future__ import annotations

import email
import email.policy
import re
from pathlib import Path
from typing import Any

from django.core.mail import EmailMessage, send_mail
from django.test import Client

from controlpanel.projects.models import Project

BACKEND = "controlpanel.core.mailfiles.EmailBackend"


def _messages(folder: Path) -> list[email.message.EmailMessage]:
    return [
        email.message_from_bytes(path.read_bytes(), policy=email.policy.default)  # type: ignore[misc]
        for path in sorted(folder.glob("*.eml"))
    ]


def test_an_invitation_is_a_file_whose_link_works(
    owner_client: Client, project: Project, settings: Any, tmp_path: Path
) -> None:
    settings.EMAIL_BACKEND, settings.EMAIL_FILE_PATH = BACKEND, str(tmp_path / "mail")
    invited = owner_client.post(
        f"/p/{project.slug}/members/invite/", {"email": "colleague@example.com", "role": "member"}
    )
    assert invited.status_code in (200, 302)
    [path] = (tmp_path / "mail").glob("*.eml")
    assert path.name.endswith("-colleague@example.com.eml")
    assert path.stat().st_mode & 0o777 == 0o600  # a one-time link is a secret
    assert (tmp_path / "mail").stat().st_mode & 0o777 == 0o700
    [message] = _messages(tmp_path / "mail")
    assert message["To"] == "colleague@example.com"
    assert message["Subject"].startswith("[Ajuste] ") and "Alpha" in message["Subject"]
    body = message.get_body().get_content()  # type: ignore[union-attr]
    link = re.search(r"https?://\S+", body)
    assert link is not None
    page = Client().get(link.group(0).replace(settings.SITE_URL, ""))
    assert page.status_code == 200 and b"Alpha" in page.content


def test_each_message_is_its_own_file(settings: Any, tmp_path: Path) -> None:
    settings.EMAIL_BACKEND, settings.EMAIL_FILE_PATH = BACKEND, str(tmp_path)
    assert send_mail("one", "first", None, ["a@example.com"]) == 1
    sent = EmailMessage("two", "second ünïcode", to=["b@example.com", "c@example.com"]).send()
    assert sent == 1
    assert EmailMessage("nobody", "x", to=[]).send() == 0
    messages = _messages(tmp_path)
    assert [m["Subject"] for m in messages] == ["one", "two"]
    assert messages[1]["To"] == "b@example.com, c@example.com"
    assert messages[1].get_body().get_content().strip() == "second ünïcode"  # type: ignore[union-attr]
