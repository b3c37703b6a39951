"""Encryption at rest for datastore credentials (Fernet: AES-128-CBC + HMAC-SHA256).

Keys come from FIELD_ENCRYPTION_KEY (comma-separated Fernet keys, or FIELD_ENCRYPTION_KEY_FILE;
the first encrypts, every one decrypts, so keys rotate without downtime). Without it, a key is
derived from SECRET_KEY with HKDF, plus one per SECRET_KEY_FALLBACKS so rotating SECRET_KEY the
Django way keeps old rows readable.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

_HKDF_INFO = b"ajuste datastore credentials v1"


class DecryptionError(RuntimeError):
    """A stored secret no key can open (FIELD_ENCRYPTION_KEY or SECRET_KEY changed)."""


def derive_key(secret: str) -> bytes:
    """A Fernet key derived from `secret` (SECRET_KEY) with HKDF-SHA256."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(raw)


def _keys() -> list[bytes]:
    configured = list(getattr(settings, "FIELD_ENCRYPTION_KEY", []) or [])
    if configured:
        return [key.encode() for key in configured]
    fallbacks = list(getattr(settings, "SECRET_KEY_FALLBACKS", []) or [])
    return [derive_key(secret) for secret in [settings.SECRET_KEY, *fallbacks]]


def check_keys() -> None:
    """Raise ImproperlyConfigured naming FIELD_ENCRYPTION_KEY if a configured key is invalid."""
    for index, key in enumerate(getattr(settings, "FIELD_ENCRYPTION_KEY", []) or []):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"FIELD_ENCRYPTION_KEY: key #{index + 1} is not a Fernet key (32 url-safe "
                "base64-encoded bytes; make one with `python -c 'from cryptography.fernet "
                "import Fernet; print(Fernet.generate_key().decode())'`)."
            ) from None


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in _keys()])


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode("ascii")


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode("ascii")).decode()
    except InvalidToken:
        # Never echo the token: say what to check instead.
        raise DecryptionError(
            "a stored datastore credential cannot be decrypted: was FIELD_ENCRYPTION_KEY or "
            "SECRET_KEY changed without keeping the old one (FIELD_ENCRYPTION_KEY list, "
            "SECRET_KEY_FALLBACKS)?"
        ) from None


def secret_hint(value: str, *, head: int = 4) -> str:
    """`AKIA…1234` (head=0 for a secret key: `…1234`): enough to recognise a credential,
    never enough to use it; short values show even less."""
    if len(value) < 12:
        return "…" + value[-2:] if len(value) > 6 else "…"
    return f"{value[:head]}…{value[-4:]}"


class EncryptedTextField(models.TextField):
    """A text column stored Fernet-encrypted; Python code sees the plain value."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        return None if value is None else decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return None if value is None else encrypt(str(value))
