"""On a cluster, pods holding the default datastore's own keys (S3_CREDENTIAL_MODE=shared) reach
every project's buckets: with more than one project that is an explicit choice. The panel
refuses to start (system check ajuste.E102, run by every management command, so by the web
pods' migrating init container and the others' wait, and by `check --deploy`) unless
S3_SHARED_CREDENTIALS_ACKNOWLEDGED=1 says the operator accepts it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from controlpanel.buckets.credentials import check_shared_credentials_on_a_cluster
from controlpanel.usercontent.domain import parse_content_domain
from tests.fixtures.panel import ProjectFactory


@pytest.fixture
def shared_on_a_cluster(settings: Any, db: Any) -> Any:
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.S3_ENDPOINT_URL = "https://s3.example.com"
    settings.S3_CREDENTIAL_MODE = "shared"
    settings.S3_SHARED_CREDENTIALS_ACKNOWLEDGED = False
    # A content domain of its own, so that ajuste.E110 (tested in usercontent) stays quiet here.
    settings.USER_CONTENT_DOMAIN = parse_content_domain("usercontent.example.net")
    return settings


def _ids() -> list[str]:
    return [message.id for message in check_shared_credentials_on_a_cluster(None)]


def test_two_projects_with_shared_keys_refuse_to_start(shared_on_a_cluster: Any) -> None:
    ProjectFactory(slug="vision")
    assert _ids() == []  # one project: its pods reach nothing of anyone else's
    ProjectFactory(slug="language")
    (error,) = check_shared_credentials_on_a_cluster(None)
    assert error.id == "ajuste.E102" and "2 projects" in error.msg
    assert "S3_SHARED_CREDENTIALS_ACKNOWLEDGED=1" in error.hint
    for args in (("check",), ("check", "--deploy")):
        with pytest.raises(SystemCheckError, match=r"ajuste\.E102"):
            call_command(*args)


def test_the_operator_acknowledges_it_or_chooses_another_mode(shared_on_a_cluster: Any) -> None:
    ProjectFactory(slug="vision")
    ProjectFactory(slug="language")
    shared_on_a_cluster.S3_SHARED_CREDENTIALS_ACKNOWLEDGED = True
    assert _ids() == []
    call_command("check", "--deploy")  # the W101 warning remains, no error
    shared_on_a_cluster.S3_SHARED_CREDENTIALS_ACKNOWLEDGED = False
    shared_on_a_cluster.S3_CREDENTIAL_MODE = "sts"
    assert _ids() == []
    shared_on_a_cluster.S3_CREDENTIAL_MODE = "shared"
    shared_on_a_cluster.COMPUTE_BACKEND = "local"  # one machine, one trust domain already
    assert _ids() == []


def test_the_setting_is_read_from_the_environment(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.controlpanel.test_settings import ROOT

    code = "from django.conf import settings; print(settings.S3_SHARED_CREDENTIALS_ACKNOWLEDGED)"
    for value, said in (("1", "True"), ("0", "False"), ("maybe", "S3_SHARED_CREDENTIALS")):
        run = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env={
                "PATH": "/usr/bin:/bin",
                "DEBUG": "1",
                "S3_SHARED_CREDENTIALS_ACKNOWLEDGED": value,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert said in run.stdout + run.stderr


@pytest.mark.django_db(transaction=True)
def test_a_management_command_on_the_database_refuses_to_start() -> None:
    """The same rule where a pod meets it: `manage.py migrate_locked` (the web pods' init
    container) on a database with two projects exits before migrating, naming the error and the
    way out; acknowledged, it runs."""
    import os
    import subprocess
    import sys

    from tests.controlpanel.test_settings import ROOT
    from tests.fixtures.processes import database_url

    ProjectFactory(slug="vision")
    ProjectFactory(slug="language")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {
        "DATABASE_URL": database_url(),
        "COMPUTE_BACKEND": "kubernetes",
        "ALLOWED_HOSTS": "ajuste.example.com",
        "USER_CONTENT_DOMAIN": "usercontent.example.net",  # else ajuste.E110
        "S3_ENDPOINT_URL": "https://s3.example.com",
        "S3_ACCESS_KEY": "AKIAEXAMPLE",
        "S3_SECRET_KEY": "example-secret",
    }

    def start(more: dict[str, str]) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "manage.py", "migrate_locked"]
        return subprocess.run(
            command, cwd=ROOT, env=env | more, capture_output=True, text=True, timeout=180
        )

    refused = start({})
    assert refused.returncode != 0
    assert "ajuste.E102" in refused.stderr and "2 projects" in refused.stderr
    assert "S3_SHARED_CREDENTIALS_ACKNOWLEDGED=1" in refused.stderr
    started = start({"S3_SHARED_CREDENTIALS_ACKNOWLEDGED": "1"})
    assert started.returncode == 0, started.stderr[-2000:]
