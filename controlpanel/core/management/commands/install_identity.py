"""Print this install's id (`ajuste.io/install` on every object it creates), or renew it for
a copy of another install's database that is to run as an install of its own."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from controlpanel.core.install import install_renew, installation


class Command(BaseCommand):
    help = (
        "Print this install's id. --renew gives it a new one: only for a copy of another "
        "install's database (a restore test, a staging seeded from production), before its "
        "worker, beat and watcher start."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--renew", action="store_true", help="give this database a new install id"
        )

    def handle(self, *args: Any, renew: bool, **options: Any) -> None:
        if not renew:
            self.stdout.write(installation().install_id)
            return
        old, new = install_renew()
        self.stdout.write(
            f"install id {old} -> {new}. Objects labelled ajuste.io/install={old} now belong "
            "to another install: this one never reads, adopts or deletes them. Restart every "
            "process of this install (web, worker, beat, watcher) so they all use the new id."
        )
