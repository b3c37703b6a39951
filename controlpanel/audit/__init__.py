"""The append-only audit log (#18): `record()` is the one way events are written.

Services call `audit.record("token.create", actor=user, project=..., target=token, name=...)`
after the change they make; the event goes into the same transaction, so an action rolled back
leaves no event. Details are small and never hold a secret (see `controlpanel.audit.log`)."""

from __future__ import annotations

from typing import Any


def record(
    action: str, *, actor: Any, project: Any = None, target: Any = None, **details: Any
) -> Any:
    """Append one event. `actor` is the user who acted, or None to take the signed-in user
    of the current request (services that receive only a ProjectAccess); `target` is a model
    instance or a `(type, id)` pair. Returns the AuditEvent."""
    from controlpanel.audit.log import record as _record

    return _record(action, actor=actor, project=project, target=target, details=details)
