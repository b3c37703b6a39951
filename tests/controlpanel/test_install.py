"""The install's identity: made once by the migration, kept in the database, shown to site
admins, given to the Kubernetes backend (so to every object it creates), renewed only on
purpose for a copy of another install's database."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from controlpanel.core import install
from controlpanel.core.models import Installation
from controlpanel.engine import backend as job_backend
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db
HEX16 = re.compile(r"^[0-9a-f]{16}$")


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    install.forget()
    yield
    install.forget()


def test_the_migration_made_one_install_id() -> None:
    [row] = Installation.objects.all()
    assert HEX16.match(row.install_id) and row.renewed_from == ""
    assert install.install_id() == row.install_id
    assert install.installation().pk == row.pk  # never a second row
    assert Installation.objects.count() == 1


def test_renewing_gives_a_new_id_and_keeps_the_old_one_in_sight() -> None:
    before = install.install_id()
    out = io.StringIO()
    call_command("install_identity", "--renew", stdout=out)
    row = Installation.objects.get()
    assert row.install_id != before and HEX16.match(row.install_id)
    assert row.renewed_from == before
    assert f"install id {before} -> {row.install_id}" in out.getvalue()
    assert install.install_id() == row.install_id
    printed = io.StringIO()
    call_command("install_identity", stdout=printed)
    assert printed.getvalue().strip() == row.install_id


def test_site_admins_see_it_read_only(admin_user: Any, owner: Any) -> None:
    client = logged_in(admin_user)
    listing = client.get(reverse("admin:core_installation_changelist"))
    assert listing.status_code == 200 and install.install_id() in listing.content.decode()
    assert client.get(reverse("admin:core_installation_add")).status_code == 403
    page = client.get(reverse("dashboard-capacity"))
    assert page.status_code == 200
    shown = re.search(r'data-testid="install-id"[^>]*>([^<]*)<', page.content.decode())
    assert shown is not None and shown.group(1) == install.install_id()
    assert logged_in(owner).get(reverse("admin:core_installation_changelist")).status_code == 302


@pytest.mark.k8s
def test_the_panels_kubernetes_backend_labels_with_it(k8s_cluster: Any, settings: Any) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.KUBERNETES_API_HOST = k8s_cluster.url
    job_backend.set_backend(None)
    try:
        built = job_backend.get_backend()
        assert built.install_id == install.install_id()  # type: ignore[attr-defined]
    finally:
        job_backend.set_backend(None)
