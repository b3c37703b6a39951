"""Egress of project pods: derived from the datastore endpoints, and the admin's extra list."""

from __future__ import annotations

import pytest

from deploy.egress import egress_for_endpoint, parse_egress
from deploy.manifests.projects import make_network_policies
from deploy.types import EgressRule, ProjectRequest
from tests.deploy.conftest import validate


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://10.1.2.3:9000", EgressRule(cidr="10.1.2.3/32", ports=(9000,))),
        ("https://[2001:db8::7]", EgressRule(cidr="2001:db8::7/128", ports=(443,))),
        ("http://minio.storage.svc:9000", EgressRule(namespace="storage", ports=(9000,))),
        (
            "http://minio.storage.svc.cluster.local",
            EgressRule(namespace="storage", ports=(80,)),
        ),
        ("https://s3.gra.io.cloud.ovh.net", EgressRule(cidr="0.0.0.0/0", ports=(443,))),
    ],
)
def test_a_rule_per_endpoint(url: str, rule: EgressRule) -> None:
    assert egress_for_endpoint(url) == rule


def test_the_admin_list_parses() -> None:
    assert parse_egress(" 10.0.0.0/8:443, namespace/proxy:3128 ,192.0.2.7,, 2001:db8::/32") == (
        EgressRule(cidr="10.0.0.0/8", ports=(443,)),
        EgressRule(namespace="proxy", ports=(3128,)),
        EgressRule(cidr="192.0.2.7/32"),
        EgressRule(cidr="2001:db8::/32"),
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10.0.0.0/8:http", "'10.0.0.0/8:http': the port must be a number"),
        ("10.0.0.0/8:70000", "from 1 to 65535"),
        ("proxy.example.com", "'proxy.example.com': write an address block"),
        ("namespace/:80", "write namespace/NAME"),
        ("namespace/Bad_Name", "write namespace/NAME"),
    ],
)
def test_a_bad_entry_is_named(text: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_egress(f"10.0.0.0/8, {text}")
    assert says in str(caught.value)


def test_the_rules_become_a_valid_allow_egress_policy() -> None:
    project = ProjectRequest(
        slug="alpha",
        namespace="ajuste-alpha",
        gpu_quota=4,
        egress=(egress_for_endpoint("http://minio.storage.svc:9000"), *parse_egress("10.0.0.0/8")),
    )
    policy = next(
        p
        for p in make_network_policies(project=project)
        if p["metadata"]["name"].endswith("egress")
    )
    validate(policy)
    assert policy["spec"]["egress"] == [
        {
            "to": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}}}
            ],
            "ports": [{"protocol": "TCP", "port": 9000}],
        },
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
    ]
