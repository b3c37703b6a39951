"""Deterministic RFC 1123 names from any id."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from deploy import names
from deploy.types import WorkloadKind, WorkloadRef

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@given(st.text(min_size=1, max_size=120))
def test_dns_label_is_valid_and_deterministic(text: str) -> None:
    name = names.dns_label(text)
    assert DNS_LABEL.match(name) and len(name) <= 63
    assert names.dns_label(text) == name


@given(st.text(min_size=1, max_size=120))
def test_label_value_is_valid(text: str) -> None:
    value = names.label_value(text)
    assert LABEL_VALUE.match(value) and len(value) <= 63


@given(st.text(max_size=40), st.text(max_size=40))
def test_distinct_ids_never_share_a_job_name(first: str, second: str) -> None:
    refs = [WorkloadRef(WorkloadKind.JOB, "p", "ns", text, 1) for text in (first, second)]
    if first != second:
        assert names.job_name(refs[0]) != names.job_name(refs[1])


def test_clean_ids_are_kept_readable() -> None:
    ref = WorkloadRef(WorkloadKind.JOB, "vision", "ajuste-vision", "42", 2)
    assert names.job_name(ref) == "job-42-r2"
    assert names.workspace_claim_name(ref) == "job-42-r2-ws"
    assert names.push_job_name(ref, 3) == "job-42-r2-push-3"
    assert names.selector(names.selector_labels(ref)) == (
        "ajuste.io/id=42,ajuste.io/kind=job,ajuste.io/project=vision,ajuste.io/run=2,"
        "app.kubernetes.io/managed-by=ajuste"
    )
