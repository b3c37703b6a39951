"""Object keys are shown so that a spoof is visible (issue 11): a bidi override, a zero-width
character, a C1 control or a line/paragraph separator in a key shows as a marker such as
⟨U+202E⟩, never as the invisible or reordering character itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from controlpanel.buckets import services
from controlpanel.buckets.templatetags.buckets import visible_key, visible_key_text
from controlpanel.projects.access import ProjectAccess
from storage import objects
from storage.datastore import DatastoreConfig

SPOOF = "invoice\u202efdp.exe"  # shows as "invoiceexe.pdf" where the override is honoured


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        (SPOOF, "invoice⟨U+202E⟩fdp.exe"),
        ("a\u200bb", "a⟨U+200B⟩b"),  # zero-width space (Cf)
        ("c1\x85control", "c1⟨U+0085⟩control"),  # NEXT LINE, a C1 control (Cc)
        ("line\u2028para\u2029end", "line⟨U+2028⟩para⟨U+2029⟩end"),  # Zl, Zp
        ("\u2066isolate\u2069", "⟨U+2066⟩isolate⟨U+2069⟩"),
        ("ünïcödé 𝄞 plain.txt", "ünïcödé 𝄞 plain.txt"),  # visible characters stay
    ],
)
def test_hidden_characters_become_markers(key: str, shown: str) -> None:
    assert visible_key_text(key) == shown
    assert re.sub(r"<[^>]+>", "", visible_key(key)) == shown


def test_markup_stays_escaped_beside_markers() -> None:
    html = visible_key("<b>\u202e&")
    assert html == (
        '&lt;b&gt;<abbr class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">'
        "⟨U+202E⟩</abbr>&amp;"
    )
    assert str(visible_key("<i>")) == "&lt;i&gt;"
    assert 'title="U+0085">' in visible_key("\x85")  # a control has no name: its code


@pytest.mark.django_db
def test_the_object_browser_shows_the_spoof(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str, owner_client: Client
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    for key in (SPOOF, "dir\u200b/inner.txt"):
        objects.put_object(datastore, bucket=bucket.name, key=key, data=b"x")
    page = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/").content.decode()
    text = re.sub(r"<[^>]+>", "", page)
    assert "invoice⟨U+202E⟩fdp.exe" in text and "dir⟨U+200B⟩/" in text
    assert 'title="Download invoice⟨U+202E⟩fdp.exe"' in page
    assert "\u202e" not in text and "\u200b" not in text  # only inside value="" and hrefs
    inner = owner_client.get(
        f"/p/alpha/buckets/LOCAL/{bucket.name}/", {"prefix": "dir\u200b/"}
    ).content.decode()
    crumb = '>dir<abbr class="hidden-char" title="U+200B ZERO WIDTH SPACE">⟨U+200B⟩</abbr></a>'
    assert crumb in inner
