"""A bucket's CORS rules: the one Ajuste adds so browsers can transfer objects with presigned
URLs, kept apart from the bucket's own rules. storage.objects re-exports the three calls."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Any

from botocore.exceptions import ClientError

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import s3_errors

__all__ = ["add_bucket_cors", "remove_bucket_cors", "set_bucket_cors"]


def set_bucket_cors(config: DatastoreConfig, *, bucket: str, origins: Iterable[str]) -> None:
    """Let browsers on `origins` GET/PUT/HEAD objects with presigned URLs and read the ETag
    (the browser needs each part's ETag to complete a multipart upload). Replaces the
    bucket's CORS rules: for buckets Ajuste created (`add_bucket_cors` keeps other rules)."""
    with s3_errors(bucket=bucket):
        make_s3_client(config).put_bucket_cors(
            Bucket=bucket, CORSConfiguration={"CORSRules": [_cors_rule(list(origins))]}
        )


def add_bucket_cors(config: DatastoreConfig, *, bucket: str, origins: Iterable[str]) -> bool:
    """Like `set_bucket_cors`, but keeping the bucket's own CORS rules (an attached bucket's
    owner may rely on them): adds Ajuste's rule unless existing rules already allow `origins`.
    Returns True when a rule was added."""
    wanted = list(origins)
    client = make_s3_client(config)
    with s3_errors(bucket=bucket):
        rules = _cors_rules(client, bucket)
        if all(_cors_allows(rules, origin) for origin in wanted):
            return False
        client.put_bucket_cors(
            Bucket=bucket, CORSConfiguration={"CORSRules": [*rules, _cors_rule(wanted)]}
        )
    return True


def remove_bucket_cors(config: DatastoreConfig, *, bucket: str, origins: Iterable[str]) -> bool:
    """Take back the rule `add_bucket_cors` added for `origins`, and nothing else: the
    bucket's own rules stay as they are (the configuration is deleted only when Ajuste's rule
    was its last). Returns True when a rule was removed, False when none was there."""
    ours = _rule_key(_cors_rule(list(origins)))
    client = make_s3_client(config)
    with s3_errors(bucket=bucket):
        rules = _cors_rules(client, bucket)
        found = [index for index, rule in enumerate(rules) if _rule_key(rule) == ours]
        if not found:
            return False
        kept = rules[: found[0]] + rules[found[0] + 1 :]
        if kept:
            client.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": kept})
        else:
            client.delete_bucket_cors(Bucket=bucket)
    return True


def _cors_rules(client: Any, bucket: str) -> list[dict[str, Any]]:
    """The bucket's CORS rules ([] when it has no configuration); call within s3_errors."""
    try:
        return list(client.get_bucket_cors(Bucket=bucket).get("CORSRules", []))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchCORSConfiguration":
            raise
        return []


def _rule_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two CORS rules the same rule, whatever order or case a server answers in
    (header names are case-insensitive; an ID is a label, not part of the rule)."""
    return (
        frozenset(rule.get("AllowedOrigins", [])),
        frozenset(rule.get("AllowedMethods", [])),
        frozenset(header.lower() for header in rule.get("AllowedHeaders", [])),
        frozenset(header.lower() for header in rule.get("ExposeHeaders", [])),
        rule.get("MaxAgeSeconds"),
    )


_CORS_METHODS = ("GET", "PUT", "HEAD")


def _cors_rule(origins: list[str]) -> dict[str, Any]:
    return {
        "AllowedOrigins": origins,
        "AllowedMethods": list(_CORS_METHODS),
        "AllowedHeaders": ["*"],
        "ExposeHeaders": ["ETag"],
        "MaxAgeSeconds": 3000,
    }


def _cors_allows(rules: Sequence[dict[str, Any]], origin: str) -> bool:
    """Whether one rule lets `origin` do what browser transfers need (S3 allows one '*'
    wildcard in an allowed origin)."""
    for rule in rules:
        methods = set(rule.get("AllowedMethods", []))
        exposed = {header.lower() for header in rule.get("ExposeHeaders", [])}
        if (
            methods.issuperset(_CORS_METHODS)
            and "etag" in exposed
            and "*" in rule.get("AllowedHeaders", [])
            and any(fnmatchcase(origin, allowed) for allowed in rule.get("AllowedOrigins", []))
        ):
            return True
    return False
