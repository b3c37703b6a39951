"""Wait until the database schema is as new as this code: the worker, beat and watcher
pods' init container runs it, so they start only after the web pods' `migrate_locked`."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from controlpanel.core.health import unapplied_migrations


class Command(BaseCommand):
    help = "Wait until every migration of this code is applied (the database may be down)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout", type=float, default=0, help="give up after SECONDS (0: wait forever)"
        )
        parser.add_argument("--interval", type=float, default=5, help="seconds between checks")

    def handle(self, *args: Any, timeout: float, interval: float, **options: Any) -> None:
        deadline = time.monotonic() + timeout if timeout > 0 else None
        last = ""
        while True:
            try:
                missing = unapplied_migrations()
                status = f"{len(missing)} migration(s) not applied yet: {', '.join(missing[:5])}"
            except Exception as exc:  # the database is not up yet: keep waiting
                connections.close_all()
                missing, status = ["?"], f"database not reachable: {type(exc).__name__}: {exc}"
            if not missing:
                self.stdout.write("the database schema is up to date")
                return
            if status != last:
                self.stdout.write(status)
                last = status
            if deadline is not None and time.monotonic() >= deadline:
                raise CommandError(f"gave up after {timeout:g} s: {status}")
            time.sleep(interval)
