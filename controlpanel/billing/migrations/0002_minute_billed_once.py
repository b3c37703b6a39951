"""On PostgreSQL, no minute of a run is in two usage lines: an exclusion constraint over the
lines' minute ranges (per run and run start), checked at commit so that a recording may
move ranges between lines. SQLite (`make run`'s embedded database) has no such constraint;
one writer at a time and the per-run key keep it exact there."""

from django.db import migrations

CREATE = """
CREATE EXTENSION IF NOT EXISTS btree_gist;
ALTER TABLE billing_line ADD CONSTRAINT billing_line_minute_billed_once
    EXCLUDE USING gist (
        run_id WITH =,
        run_start WITH =,
        int4range(first_minute, first_minute + minutes) WITH &&
    ) WHERE (period = of_period)
    DEFERRABLE INITIALLY DEFERRED;
"""
DROP = "ALTER TABLE billing_line DROP CONSTRAINT billing_line_minute_billed_once;"


def forwards(apps: object, schema_editor: object) -> None:
    if schema_editor.connection.vendor == "postgresql":  # type: ignore[attr-defined]
        schema_editor.execute(CREATE)  # type: ignore[attr-defined]


def backwards(apps: object, schema_editor: object) -> None:
    if schema_editor.connection.vendor == "postgresql":  # type: ignore[attr-defined]
        schema_editor.execute(DROP)  # type: ignore[attr-defined]


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
