"""What `make run` does with Django before the processes start, in one Django start (each
`manage.py` command paid its own: 3 of them, 2-8 s each on a busy machine):

1. the local backend's trust check (ajuste.E001), first and alone: a trial a colleague joined
   stops here with the one-line fix, before anything else is said;
2. migrations, only when some are not applied (the plan is read, not `migrate` run);
3. static files, collected only when their sources changed since the last collection (a
   fingerprint of every file the finders list: name, size, mtime);
4. the first admin and the demo project (`bootstrap`);
5. what it looked at is stamped (unchanged.py): the next start skips this process when nothing
   changed.

Run as `python -m controlpanel.localrun.prepare` with make run's environment; exit status 3
means the trust check refused (its message already printed), anything else but 0 a failure.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import django

from controlpanel.localrun import unchanged

REFUSED = 3
STAMP = ".ajuste-collected"  # in STATIC_ROOT: the fingerprint of what was collected there


def trust_problem() -> str | None:
    """What keeps the local backend from running here, in make run's words; None when fine."""
    from controlpanel.engine.checks import local_backend_problems

    problems = local_backend_problems()
    if not problems:
        return None
    return (
        "make run: the local backend runs every job and notebook as this machine's user, and "
        f"this panel has {'; and '.join(problems)}.\n"
        "  If you trust everyone who can log in with all of that, start it with:\n\n"
        "      AJUSTE_LOCAL_BACKEND_TRUSTED=1 make run\n\n"
        "  Otherwise deactivate the other accounts (python manage.py shell, or the People page "
        "of a trusted start) or use COMPUTE_BACKEND=kubernetes (README: the local backend)."
    )


def migrate_if_needed() -> bool:
    """Apply unapplied migrations; whether there were any."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
        return False
    print("• applying database migrations", flush=True)
    call_command("migrate", "--noinput", verbosity=0)
    return True


def static_fingerprint() -> str:
    """A digest of every file collectstatic would copy, and of where and how it stores them."""
    from django.conf import settings
    from django.contrib.staticfiles.finders import get_finders

    digest = hashlib.sha256(settings.STORAGES["staticfiles"]["BACKEND"].encode())
    for finder in get_finders():
        for path, storage in finder.list(["CVS", ".*", "*~"]):
            info = os.stat(storage.path(path))
            prefix = getattr(storage, "prefix", "") or ""
            digest.update(f"{prefix}/{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def collect_if_changed() -> bool:
    """collectstatic when the sources changed since the last one; whether it ran."""
    from django.conf import settings
    from django.core.management import call_command

    stamp = Path(settings.STATIC_ROOT) / STAMP
    fingerprint = static_fingerprint()
    if stamp.exists() and stamp.read_text() == fingerprint:
        return False
    print("• collecting static files", flush=True)
    call_command("collectstatic", "--noinput", verbosity=0)
    stamp.write_text(fingerprint)
    return True


def mark_demo_wanted() -> None:
    """Leave var/run/demo-wanted when the demo project lacks its bucket: make run fills it in
    the background once the panel answers (torch and a tiny model: seconds of CPU)."""
    from django.conf import settings

    from controlpanel.buckets.models import Bucket
    from controlpanel.jobs.demo import DEMO_BUCKET
    from controlpanel.projects.models import Project

    project = Project.objects.filter(slug="demo").first()
    if project and not Bucket.objects.filter(project=project, name=DEMO_BUCKET).exists():
        folder = Path(settings.VAR_DIR) / "run"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        (folder / "demo-wanted").touch()


def _timed(steps: list[str], name: str, step: Callable[[], object]) -> None:
    started = time.monotonic()
    step()
    steps.append(f"{name} {time.monotonic() - started:.1f} s")


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    started = time.monotonic()
    django.setup()
    steps = [f"django {time.monotonic() - started:.1f} s"]
    problem = trust_problem()
    if problem:
        print(problem, file=sys.stderr, flush=True)
        return REFUSED
    from django.core.management import call_command

    _timed(steps, "migrations", migrate_if_needed)
    _timed(steps, "static", collect_if_changed)
    _timed(steps, "accounts", lambda: call_command("bootstrap"))
    mark_demo_wanted()
    from django.conf import settings

    unchanged.record(Path(settings.BASE_DIR), Path(settings.VAR_DIR), os.environ)
    print(f"• prepared in {time.monotonic() - started:.1f} s ({', '.join(steps)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
