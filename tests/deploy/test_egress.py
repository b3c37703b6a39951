"""Egress of project pods: DNS to the cluster's resolvers only, the datastore endpoints and the
admin's extra list; wide rules never reach private or link-local addresses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from deploy.egress import (
    egress_for_endpoint,
    excluded_ranges,
    parse_cidrs,
    parse_dns,
    parse_egress,
    parse_node_local_dns,
)
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


WIDE_EXCEPT = [
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
]


def _policy(project: ProjectRequest, suffix: str) -> dict[str, Any]:
    policy = next(
        p for p in make_network_policies(project=project) if p["metadata"]["name"].endswith(suffix)
    )
    validate(policy)
    return policy


def test_a_datastore_by_host_name_opens_no_private_or_metadata_address() -> None:
    project = ProjectRequest(
        slug="alpha",
        namespace="ajuste-alpha",
        gpu_quota=4,
        egress=(
            egress_for_endpoint("https://s3.gra.io.cloud.ovh.net"),
            EgressRule(cidr="::/0", ports=(443,)),
            *parse_egress("10.20.0.0/16:8080, 192.0.2.7"),
        ),
    )
    assert _policy(project, "egress")["spec"]["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": WIDE_EXCEPT}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
        {
            "to": [{"ipBlock": {"cidr": "::/0", "except": ["::1/128", "fc00::/7", "fe80::/10"]}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
        # Listed by the admin inside a private range: precise, kept as written.
        {
            "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        },
        {"to": [{"ipBlock": {"cidr": "192.0.2.7/32"}}]},
    ]


def test_private_ranges_the_admin_allows_stay_open_in_wide_rules() -> None:
    assert excluded_ranges("0.0.0.0/0", parse_cidrs("10.0.0.0/9, 192.168.0.0/16")) == [
        "10.128.0.0/9",
        *WIDE_EXCEPT[1:5],
    ]
    assert excluded_ranges("169.254.0.0/16", ()) == []  # listed on its own: the admin's word
    assert excluded_ranges("160.0.0.0/4", ()) == ["169.254.0.0/16", "172.16.0.0/12"]


def test_dns_goes_to_the_cluster_resolvers_only() -> None:
    dns = (
        *parse_dns("kube-system/k8s-app=kube-dns, 10.96.0.10"),
        *parse_node_local_dns("169.254.20.10"),
    )
    project = ProjectRequest(slug="alpha", namespace="ajuste-alpha", gpu_quota=4, dns=dns)
    ports = [{"protocol": p, "port": n} for n in (53, 5353) for p in ("UDP", "TCP")]
    assert _policy(project, "dns")["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                },
                {"ipBlock": {"cidr": "10.96.0.10/32"}},
                {"ipBlock": {"cidr": "169.254.20.10/32"}},
            ],
            "ports": ports,
        }
    ]
    # Every rule names where it goes: no port-53 rule without a destination.
    assert all(rule.get("to") for rule in _policy(project, "dns")["spec"]["egress"])


def test_dns_settings_parse() -> None:
    assert parse_dns("openshift-dns/dns.operator.openshift.io/daemonset-dns=default,kube-dns") == (
        EgressRule(
            namespace="openshift-dns",
            pod_labels={"dns.operator.openshift.io/daemonset-dns": "default"},
        ),
        EgressRule(namespace="kube-dns"),
    )
    assert parse_node_local_dns("") == ()
    assert parse_cidrs(" 10.20.0.0/16 ,, fd00::/8") == ("10.20.0.0/16", "fd00::/8")


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (parse_dns, "", "name the cluster's DNS"),
        (parse_dns, "kube-system/k8s-app", "'kube-system/k8s-app': write NAMESPACE/LABEL=VALUE"),
        (parse_dns, "Kube_System", "'Kube_System': write NAMESPACE/LABEL=VALUE"),
        (parse_dns, "kube-system/k8s-app=kube dns", "'kube-system/k8s-app=kube dns'"),
        (parse_node_local_dns, "169.254.20.0/24", "'169.254.20.0/24': write one IP address"),
        (parse_node_local_dns, "node-local", "'node-local': write one IP address"),
        (parse_cidrs, "10.0.0.0/8, private", "'private': write an address block"),
    ],
)
def test_a_bad_dns_or_private_setting_is_named(
    parse: Callable[[str], object], text: str, says: str
) -> None:
    with pytest.raises(ValueError) as caught:
        parse(text)
    assert says in str(caught.value)
