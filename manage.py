#!/usr/bin/env python
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    from controlpanel.runenv import load_run_env

    # After `make run`, the same key, database, Redis and object store (var/run.env).
    load_run_env(Path(__file__).resolve().parent)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
