"""First-run set-up for `make run`: the first admin and a starter project, once."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from controlpanel.projects.models import Membership, Project, Role
from controlpanel.runenv import write_private


class Command(BaseCommand):
    help = "Create the first admin (and a 'demo' project) if no admin exists yet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--demo",
            action="store_true",
            help="Also fill a 'demo' bucket with a tiny model and a dataset.",
        )

    def handle(self, *args: Any, demo: bool = False, **options: Any) -> None:
        with transaction.atomic():
            self._first_admin()
        if demo:
            self._demo()

    def _demo(self) -> None:
        from controlpanel.jobs.demo import seed_demo

        project = Project.objects.filter(slug="demo").first()
        admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if project is None or admin is None:
            return
        try:
            bucket = seed_demo(project=project, admin=admin)
        except Exception as exc:  # the demo is a nicety: never block start-up on it
            self.stderr.write(f"• the demo bucket could not be filled: {exc}")
            return
        if bucket is not None:
            self.stdout.write(
                self.style.SUCCESS(
                    "• filled the demo bucket: a tiny model and a chat dataset — open Jobs → "
                    "New job in the Demo project and submit the pre-filled fine-tune"
                )
            )

    def _first_admin(self) -> None:
        users = get_user_model()
        existing = users.objects.filter(is_superuser=True).order_by("pk").first()
        if existing is not None:
            self.stdout.write(f"• admin account: {existing.username}")
            return
        # Credentials are chosen with both variables; a user name left exported from another
        # tool, without its password, does not rename the admin the README logs in as.
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "admin") if password else "admin"
        generated = not password
        password = password or secrets.token_urlsafe(12)
        admin = users.objects.create_superuser(
            username=username, email=os.environ.get("DJANGO_SUPERUSER_EMAIL", ""), password=password
        )
        project, _ = Project.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
        Membership.objects.get_or_create(
            project=project, user=admin, defaults={"role": Role.MANAGER}
        )
        if generated:
            note = Path(settings.VAR_DIR) / "admin-password.txt"
            write_private(note, f"{username}\n{password}\n")
            self.stdout.write(
                self.style.SUCCESS(
                    f"• created the admin account: user {username}, password {password} "
                    f"(saved once in {note}; change it under Settings)"
                )
            )
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"• created the admin account {username} with DJANGO_SUPERUSER_PASSWORD"
                )
            )
