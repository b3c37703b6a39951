"""The workload kinds, each named once, by the package that holds it (DESIGN.md rule 16, in the
manner of healthchecks' TRANSPORTS): `<package>.kind` declares what the engine needs
(controlpanel/engine/registry.py reads it), `<package>.cli` holds its `ajuste` command group.

Plain data that imports nothing: the `ajuste` CLI, which imports no Django, reads it too.
A new kind is its package and one line here (README: Architecture)."""

KINDS: dict[str, str] = {
    "job": "controlpanel.jobs",
    "notebook": "controlpanel.notebooks",
    "app": "controlpanel.served",
}
