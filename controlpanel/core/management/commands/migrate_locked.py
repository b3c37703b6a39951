"""`migrate` under a PostgreSQL advisory lock: the web pods' init container runs it, so pods
that start together (replicas, a rolling update) apply the migrations one at a time; the
others wait for the lock, then find nothing left to apply."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

# One constant shared by every Ajuste process: the bytes "ajmigrat" as a signed 64-bit integer.
LOCK_KEY = int.from_bytes(b"ajmigrat", "big", signed=True)


class Command(BaseCommand):
    help = "Apply the migrations, one process at a time (PostgreSQL advisory lock)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args: Any, database: str, **options: Any) -> None:
        connection = connections[database]
        if connection.vendor != "postgresql":
            # SQLite (`make run`): one machine, and its write lock already serialises.
            call_command("migrate", interactive=False, database=database, stdout=self.stdout)
            return
        with connection.cursor() as cursor:
            self.stdout.write("waiting for the migration lock")
            # Session-level: migrate commits its own transactions while we hold it.
            cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
            try:
                self.stdout.write("migration lock held")
                call_command("migrate", interactive=False, database=database, stdout=self.stdout)
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
