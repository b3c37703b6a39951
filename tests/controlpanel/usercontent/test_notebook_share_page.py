"""Sharing a notebook from its page (issue 25): the owner picks one current active member in a
select and presses Share; each member it is shared with has Unshare for the owner or a manager.
The page posts to the same services as the API (notebooks/sharing.py), so the same rules hold:
a hostile member posting the form by hand changes nothing, nor does naming a removed or
deactivated member, and every name on the page is escaped."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.audit.models import AuditEvent
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Membership, Project
from controlpanel.projects.services import member_remove
from tests.controlpanel.usercontent import test_notebook_shares as shares
from tests.controlpanel.usercontent.test_notebook_shares import opens
from tests.fixtures.panel import UserFactory, add_member, api_client_for, logged_in

pytestmark = pytest.mark.django_db
# The API tests' fixtures: a plain member's running notebook, two colleagues.
notebook, colleague, mallory = shares.notebook, shares.colleague, shares.mallory


def page(user: Any, notebook: Notebook) -> str:
    return logged_in(user).get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()


def post_form(user: Any, notebook: Notebook, action: str, member: str) -> str:
    """The form's POST as a browser sends it; the page it lands on (with its message)."""
    answer = logged_in(user).post(
        f"/p/alpha/notebooks/{notebook.pk}/{action}/", {"member": member}, follow=True
    )
    assert answer.redirect_chain[-1][0] == f"/p/alpha/notebooks/{notebook.pk}/"
    return answer.content.decode()


def options(html: str) -> list[str]:
    """The usernames offered in the share form's select."""
    if 'data-testid="share-member-form"' not in html:
        return []
    form = html.split('data-testid="share-member-form"', 1)[1].split("</form>", 1)[0]
    return [part.split('"', 1)[0] for part in form.split('<option value="')[1:]]


def shared_with(notebook: Notebook) -> list[int]:
    return list(Notebook.objects.get(pk=notebook.pk).params.get("shared_with", []))


def test_the_owner_shares_with_one_member_from_the_page_and_takes_it_back(
    notebook: Notebook, member: Any, owner: Any, colleague: Any, mallory: Any
) -> None:
    html = page(member, notebook)
    assert options(html) == ["colleague", "mallory", "owner"]  # never the owner themselves
    assert not opens(colleague, notebook)
    html = post_form(member, notebook, "share-member", "colleague")
    assert "Shared with colleague: they can open it." in html
    assert "the members it is shared with (colleague) can open it" in html
    assert options(html) == ["mallory", "owner"]  # shared already: no longer offered
    assert html.count('data-testid="unshare-member"') == 1
    assert opens(colleague, notebook) and not opens(mallory, notebook)
    event = AuditEvent.objects.get(action="notebook.share")
    assert event.actor == member and event.details["member"] == "colleague"

    html = post_form(member, notebook, "unshare-member", "colleague")
    assert "colleague can no longer open it." in html
    assert f"Only its owner, {member.username}, can open it" in html
    assert 'data-testid="unshare-member"' not in html
    assert options(html) == ["colleague", "mallory", "owner"]
    assert not opens(colleague, notebook)
    assert AuditEvent.objects.get(action="notebook.unshare").actor == member


def test_a_hostile_member_posting_the_form_changes_nothing_and_a_manager_only_unshares(
    notebook: Notebook, member: Any, owner: Any, colleague: Any, mallory: Any
) -> None:
    post_form(member, notebook, "share-member", "colleague")
    before = shared_with(notebook)
    html = page(mallory, notebook)  # a colleague sees who can open it, and no control
    assert "(colleague) can open it" in html
    assert options(html) == [] and 'data-testid="unshare-member"' not in html
    # Posted by hand all the same: to herself, to another, or taking a share back.
    html = post_form(mallory, notebook, "share-member", "mallory")
    assert "Only the notebook&#x27;s owner can share it." in html
    post_form(mallory, notebook, "share-member", "owner")
    html = post_form(mallory, notebook, "unshare-member", "colleague")
    assert "Only the notebook&#x27;s owner or a manager can take a share back." in html
    # The manager may stop it, not open it: sharing it with themselves is refused too.
    html = page(owner, notebook)
    assert options(html) == [] and html.count('data-testid="unshare-member"') == 1
    html = post_form(owner, notebook, "share-member", "owner")
    assert "Only the notebook&#x27;s owner can share it." in html
    assert shared_with(notebook) == before
    assert not opens(mallory, notebook) and not opens(owner, notebook)
    assert AuditEvent.objects.filter(action="notebook.share").count() == 1
    # Taking the colleague's share back is the manager's to do.
    html = post_form(owner, notebook, "unshare-member", "colleague")
    assert "colleague can no longer open it." in html
    assert shared_with(notebook) == [] and not opens(colleague, notebook)
    assert AuditEvent.objects.get(action="notebook.unshare").actor == owner


def test_a_removed_or_deactivated_member_is_not_offered_and_is_refused(
    notebook: Notebook, project: Project, member: Any, owner: Any, colleague: Any,
    mallory: Any, outsider: Any,
) -> None:  # fmt: skip
    membership = Membership.objects.get(project=project, user=colleague)
    member_remove(access=project_access(user=owner, slug="alpha"), membership=membership)
    type(mallory).objects.filter(pk=mallory.pk).update(is_active=False)
    assert options(page(member, notebook)) == ["owner"]
    for name in ("colleague", "mallory", "outsider"):
        html = post_form(member, notebook, "share-member", name)
        assert f"{name} is not a member of this project." in html
    html = post_form(member, notebook, "share-member", "   ")
    assert "Name the member to share it with (a username)." in html
    html = post_form(member, notebook, "unshare-member", "colleague")
    assert "The notebook is not shared with colleague." in html
    assert shared_with(notebook) == []
    assert not AuditEvent.objects.filter(action__in=["notebook.share", "notebook.unshare"])
    assert not opens(colleague, notebook) and not opens(outsider, notebook)


def test_member_names_and_posted_text_are_escaped(
    notebook: Notebook, project: Project, member: Any
) -> None:
    hostile = '<img src=x onerror="alert(1)">'
    add_member(project, UserFactory(username=hostile))
    html = page(member, notebook)
    assert hostile not in html
    assert options(html) == ["&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"]
    html = post_form(member, notebook, "share-member", hostile)
    assert hostile not in html
    assert "Shared with &lt;img src=x onerror=&quot;alert(1)&quot;&gt;: they can open it." in html
    assert "(&lt;img src=x onerror=&quot;alert(1)&quot;&gt;) can open it" in html
    assert 'name="member" value="&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"' in html
    html = post_form(member, notebook, "share-member", "<script>alert(2)</script>")
    assert "<script>alert(2)" not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt; is not a member of this project." in html
    html = post_form(member, notebook, "unshare-member", hostile)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; can no longer open it." in html
    assert hostile not in html and shared_with(notebook) == []


def test_the_api_refuses_a_deactivated_member_as_the_page_does(
    notebook: Notebook, member: Any, mallory: Any
) -> None:
    type(mallory).objects.filter(pk=mallory.pk).update(is_active=False)
    answer = api_client_for(member).post(
        f"/api/v1/notebooks/{notebook.pk}/share/?project=alpha", {"member": "mallory"}, "json"
    )
    assert answer.status_code == 400
    assert answer.json() == {"member": ["mallory is not a member of this project."]}
    assert shared_with(notebook) == []
