"""Credentials that reach only some buckets, for pods: a datastore's own keys reach every bucket
they can see, so pods get narrower ones where the datastore can issue them.

- The embedded store (`storage/s3rver`): scoped key pairs, granted and revoked through its
  `/_ajuste/keys` admin API with the root key (`embedded_grant`, `embedded_revoke`).
- S3 STS (AWS, MinIO, Ceph RGW): `AssumeRole` with a session policy that allows only the
  listed buckets (`assume_role`, `session_policy`). The credentials expire (at most the role's
  maximum session, 12 h on AWS; 1 h when the datastore's keys are themselves a role session).
"""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError

from storage.client import make_sts_client
from storage.datastore import DatastoreConfig
from storage.errors import AccessDenied, StorageError, StorageUnavailable, translate

# AWS refuses a packed session policy over 2,048 characters.
SESSION_POLICY_MAX = 2048
DURATION_MIN_S = 900
DURATION_MAX_S = 43200
ROLE_ARN = re.compile(r"arn:(aws[a-z-]*):iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}")
BUCKET_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads")
OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
ADMIN_TIMEOUT_S = 10


class CredentialError(StorageError):
    """Scoped credentials could not be issued (a bad setting, a refusal, too many buckets)."""


@dataclass(frozen=True)
class TemporaryCredentials:
    """What `assume_role` returns: the datastore with the session's keys, and its expiry."""

    config: DatastoreConfig
    expires_at: datetime


def new_key_pair(prefix: str = "ajp") -> tuple[str, str]:
    """A fresh access key (`<prefix>-` and 24 hex digits) and a 40-character secret."""
    return f"{prefix}-{secrets.token_hex(12)}", secrets.token_urlsafe(30)


# ---- the embedded store ----------------------------------------------------------------


def embedded_grant(
    root: DatastoreConfig, *, access_key: str, secret_key: str, buckets: Iterable[str]
) -> None:
    """Create or replace a key pair on the embedded store that reaches only `buckets`."""
    body = json.dumps({"secretKey": secret_key, "buckets": sorted(set(buckets))}).encode()
    _admin(root, "PUT", f"/_ajuste/keys/{quote(access_key, safe='')}", body)


def embedded_revoke(root: DatastoreConfig, *, access_key: str) -> bool:
    """Revoke a scoped key; False when the store did not know it (already revoked)."""
    status, _ = _admin(root, "DELETE", f"/_ajuste/keys/{quote(access_key, safe='')}", b"", (404,))
    return status != 404


def embedded_keys(root: DatastoreConfig) -> dict[str, tuple[str, ...]]:
    """Every scoped key the embedded store holds, with its buckets."""
    _, body = _admin(root, "GET", "/_ajuste/keys", b"")
    return {k["accessKey"]: tuple(k["buckets"]) for k in json.loads(body)["keys"]}


def _admin(
    root: DatastoreConfig, method: str, path: str, body: bytes, allowed: tuple[int, ...] = ()
) -> tuple[int, bytes]:
    """One request to the embedded store's admin API, signed with the root key."""
    url = root.endpoint_url.rstrip("/") + path
    request = AWSRequest(method=method, url=url, data=body)
    request.headers["X-Amz-Content-SHA256"] = hashlib.sha256(body).hexdigest()
    credentials = Credentials(root.access_key, root.secret_key)
    S3SigV4Auth(credentials, "s3", root.region or "us-east-1").add_auth(request)
    parts = urlsplit(url)
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.netloc, timeout=ADMIN_TIMEOUT_S)
    try:
        connection.request(method, path, body=body, headers=dict(request.headers.items()))
        response = connection.getresponse()
        data = response.read()
    except OSError as error:
        raise StorageUnavailable(f"the embedded store did not answer: {error}") from error
    finally:
        connection.close()
    if response.status < 300 or response.status in allowed:
        return response.status, data
    code, message = _error_of(data, response.status)
    kind = AccessDenied if response.status == 403 else CredentialError
    raise kind(f"the embedded store refused {method} {path}: {code} {message}".strip(), code=code)


def _error_of(body: bytes, status: int) -> tuple[str, str]:
    """The <Code> and <Message> of an S3 error answer."""
    text = body.decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else str(status)), html.unescape(
        message.group(1) if message else ""
    )


# ---- STS AssumeRole with a session policy ----------------------------------------------


def session_policy(buckets: Iterable[str], *, partition: str = "aws") -> dict[str, object]:
    """The IAM policy allowing read, write, list and multipart uploads in `buckets` only."""
    names = sorted(set(buckets))
    if not names:
        raise ValueError("a session policy needs at least one bucket")
    arn = f"arn:{partition}:s3:::"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListTheseBuckets",
                "Effect": "Allow",
                "Action": list(BUCKET_ACTIONS),
                "Resource": [arn + name for name in names],
            },
            {
                "Sid": "ObjectsInTheseBuckets",
                "Effect": "Allow",
                "Action": list(OBJECT_ACTIONS),
                "Resource": [f"{arn}{name}/*" for name in names],
            },
        ],
    }


def session_policy_json(buckets: Iterable[str], *, partition: str = "aws") -> str:
    """The policy as AssumeRole takes it (compact); CredentialError when over AWS's limit."""
    names = sorted(set(buckets))
    text = json.dumps(session_policy(names, partition=partition), separators=(",", ":"))
    if len(text) > SESSION_POLICY_MAX:
        raise CredentialError(
            f"a session policy for {len(names)} buckets takes {len(text)} characters, over "
            f"the {SESSION_POLICY_MAX} STS accepts: use fewer buckets on this datastore per project"
        )
    return text


def role_partition(role_arn: str) -> str:
    """The ARN partition of a role (`aws`, `aws-cn`, `aws-us-gov`); ValueError when malformed."""
    match = ROLE_ARN.fullmatch(role_arn)
    if match is None:
        raise ValueError(f"{role_arn!r} is not a role ARN (arn:aws:iam::123456789012:role/name)")
    return match.group(1)


def sts_endpoint(config: DatastoreConfig, explicit: str = "") -> str | None:
    """Where STS answers: `explicit` when set; AWS's own STS (None: boto3's regional default)
    for an amazonaws.com endpoint; else the S3 endpoint itself (MinIO and Ceph RGW serve STS
    there)."""
    if explicit:
        return explicit
    host = urlsplit(config.endpoint_url).hostname or ""
    return (
        None if host == "amazonaws.com" or host.endswith(".amazonaws.com") else config.endpoint_url
    )


def assume_role(
    config: DatastoreConfig,
    *,
    role_arn: str,
    session_name: str,
    buckets: Iterable[str],
    duration_s: int = 3600,
    sts_endpoint_url: str = "",
) -> TemporaryCredentials:
    """Temporary credentials for `role_arn`, narrowed by a session policy to `buckets`.
    The caller is `config`'s own key pair; the result keeps `config`'s endpoints."""
    if not DURATION_MIN_S <= duration_s <= DURATION_MAX_S:
        raise ValueError(
            f"duration must be {DURATION_MIN_S} to {DURATION_MAX_S} s, not {duration_s}"
        )
    try:
        partition = role_partition(role_arn)
    except ValueError as error:
        raise CredentialError(str(error)) from None
    policy = session_policy_json(buckets, partition=partition)
    client = make_sts_client(config, endpoint_url=sts_endpoint(config, sts_endpoint_url))
    try:
        answer = client.assume_role(
            RoleArn=role_arn,
            RoleSessionName=_session_name(session_name),
            Policy=policy,
            DurationSeconds=duration_s,
        )
    except (ClientError, BotoCoreError) as error:
        failure = translate(error)
        raise CredentialError(
            f"AssumeRole {role_arn} failed: {failure.message}", code=failure.code
        ) from error
    issued = answer["Credentials"]
    scoped = replace(
        config,
        access_key=issued["AccessKeyId"],
        secret_key=issued["SecretAccessKey"],
        session_token=issued["SessionToken"],
    )
    return TemporaryCredentials(config=scoped, expires_at=issued["Expiration"])


def _session_name(text: str) -> str:
    """A RoleSessionName (2 to 64 of [\\w+=,.@-]); it shows in the datastore's audit logs."""
    cleaned = re.sub(r"[^\w+=,.@-]", "-", text)[:64]
    return cleaned if len(cleaned) >= 2 else f"ajuste-{cleaned}"
