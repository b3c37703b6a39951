"""tests/fixtures/flush.py: a transactional test's reset leaves what Django's flush leaves."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import TransactionTestCase

from tests.fixtures.flush import SCHEMA_TABLES, empty_database
from tests.fixtures.panel import add_member


def rows_per_table() -> dict[str, int]:
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    with connection.cursor() as cursor:
        counts = {}
        for table in tables:
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")  # noqa: S608
            counts[table] = cursor.fetchone()[0]
    return counts


def test_django_transactional_teardown_is_the_fast_reset() -> None:
    teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]
    assert teardown.__module__ == "tests.fixtures.flush"


@pytest.mark.django_db(transaction=True)
def test_every_row_goes_but_the_content_types_and_permissions(
    owner: Any, outsider: Any, project: Any, other_project: Any
) -> None:
    add_member(other_project, owner)
    owner.user_permissions.add(Permission.objects.first())
    before = rows_per_table()
    assert before["accounts_user"] == 2 and before["projects_membership"] == 3
    held = set(empty_database("default"))
    after = rows_per_table()
    assert {"accounts_user", "projects_project", "projects_membership"} <= held
    assert not set(held) & set(SCHEMA_TABLES)
    assert {table: n for table, n in after.items() if n and table not in SCHEMA_TABLES} == {}
    assert after["django_content_type"] == before["django_content_type"] > 0
    assert after["auth_permission"] == before["auth_permission"] > 0


@pytest.mark.django_db(transaction=True)
def test_deleted_content_types_and_permissions_are_put_back() -> None:
    empty_database("default")  # the baseline: what post_migrate leaves
    expected = (ContentType.objects.count(), Permission.objects.count())
    ContentType.objects.filter(app_label="projects").delete()  # their permissions go too
    assert (ContentType.objects.count(), Permission.objects.count()) < expected
    empty_database("default")
    assert (ContentType.objects.count(), Permission.objects.count()) == expected
    assert Permission.objects.filter(codename="add_project").exists()
