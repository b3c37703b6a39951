"""Live pages (controlpanel/streams): where pages open their event streams, and their limits."""

from __future__ import annotations

from controlpanel.env import env_int, env_list, env_str
from controlpanel.settings_parts.site import SITE_URL

__all__ = [
    "STREAMS_ALLOWED_ORIGINS",
    "STREAMS_HEARTBEAT_SECONDS",
    "STREAMS_MAX_PER_USER",
    "STREAMS_READ_THREADS",
    "STREAMS_RECHECK_SECONDS",
    "STREAMS_URL",
]

# Live pages (controlpanel/streams): Server-Sent Events served by the ASGI server
# (controlpanel.asgi, the Procfile's `events`). STREAMS_URL is where pages open them: the
# events server's own URL (make run sets it), or the panel's (SITE_URL) behind a gateway that
# routes /p/*/events/ and /api/v1/*/logs/stream/ to it; empty, pages poll. They poll too when
# a stream cannot be held.
STREAMS_URL = (env_str("STREAMS_URL") or "").rstrip("/")
STREAMS_ALLOWED_ORIGINS = env_list("STREAMS_ALLOWED_ORIGINS", [SITE_URL])
STREAMS_MAX_PER_USER = env_int("STREAMS_MAX_PER_USER", 20, minimum=1)
STREAMS_HEARTBEAT_SECONDS = env_int("STREAMS_HEARTBEAT_SECONDS", 15, minimum=1)
# An open stream asks again whether its viewer may follow it when told (a logout, a
# deactivation, a lost project) and, in case a message was lost, this often.
STREAMS_RECHECK_SECONDS = env_int("STREAMS_RECHECK_SECONDS", 300, minimum=1)
# The threads an events process reads rows on, each holding a database connection only while
# it reads: the most connections one events process opens at once.
STREAMS_READ_THREADS = env_int("STREAMS_READ_THREADS", 8, minimum=1)
