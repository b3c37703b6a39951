"""An e-mail backend that keeps each message as a file (`make run`'s: var/mail/), where a person
can read it, instead of the console, where it drowned among the web process's access log.

One `.eml` file per message (RFC 822, as a mail client opens it), named by when it was sent,
a counter and the first recipient, written owner-only: an invitation holds a one-time link."""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage

_COUNTER = itertools.count(1)
_LOCK = threading.Lock()


def mail_dir() -> Path:
    return Path(settings.EMAIL_FILE_PATH)


class EmailBackend(BaseEmailBackend):
    """Writes each message to EMAIL_FILE_PATH/<UTC time>-<pid>-<n>-<recipient>.eml."""

    def __init__(self, fail_silently: bool = False, **kwargs: Any) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.directory = mail_dir()

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        sent = 0
        for message in email_messages:
            if not message.recipients():
                continue
            self._write(message)
            sent += 1
        return sent

    def _write(self, message: EmailMessage) -> Path:
        with _LOCK:
            number = next(_COUNTER)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        who = re.sub(r"[^A-Za-z0-9@._-]", "_", message.recipients()[0])[:60]
        path = self.directory / f"{stamp}-{os.getpid()}-{number}-{who}.eml"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(message.message().as_bytes())  # Django's: "\n" line ends
        return path
