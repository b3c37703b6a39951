from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlpanel.accounts.services import token_create


class Command(BaseCommand):
    help = "Print a new personal API token for USERNAME (for scripts and CI)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="Name shown on the settings page.")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        _, raw = token_create(user=user, name=name)
        self.stdout.write(raw)
