"""The site's stream: `GET /dashboard/events/`, what the site admins' all-projects dashboard
and capacity view follow instead of polling.

It is a project stream (streams/project.py) over every project: the same coalesced `changed`
notices, for any project's workload, and `"capacity": true` in one when the periodic task kept
a new capacity reading (or Kueue's shares). Site admins only, as their pages: anyone else 404,
anonymous 401. It ends with an `end` event when the viewer logs out, is deactivated or is no
longer a site admin (a save that takes `is_staff` away tells their streams at once; the
periodic re-check catches the rest).
"""

from __future__ import annotations

import re
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from controlpanel.streams.channels import site_channel, user_channel
from controlpanel.streams.feed import _read
from controlpanel.streams.project import ProjectStream
from controlpanel.streams.viewer import LOGGED_OUT, Viewer, signed_out

SITE = re.compile(r"^/dashboard/events/$")
NOT_ADMIN = "You are no longer a site admin."


def is_site_admin(user: Any) -> bool:
    """The gate of the site admins' pages (projects.access.site_admin_page), read again."""
    return get_user_model().objects.filter(pk=user.pk, is_active=True, is_staff=True).exists()


def site_access_lost(viewer: Viewer) -> str | None:
    """Why the viewer may no longer follow the site's stream, or None (rows read)."""
    user, why = signed_out(viewer)
    if why is None and not user.is_staff:
        return NOT_ADMIN
    return why


site_watched = _read(is_site_admin)
_site_access_lost = _read(site_access_lost)


class SiteGuard:
    """The site stream's check of its viewer (as feed.Guard, without a project)."""

    def __init__(self, viewer: Viewer) -> None:
        self.viewer = viewer
        self.checked = time.monotonic()

    async def lost(self, message: dict[str, Any] | None = None) -> str | None:
        if message is not None:
            if self.viewer.logged_out(message):
                return LOGGED_OUT
            if message.get("t") != "revoke" or self.viewer.other_session(message):
                return None
        elif time.monotonic() - self.checked < settings.STREAMS_RECHECK_SECONDS:
            return None
        self.checked = time.monotonic()
        return await _site_access_lost(self.viewer)


def site_stream(viewer: Viewer, heartbeat_s: float) -> ProjectStream:
    stream = ProjectStream(viewer, 0, "", heartbeat_s)
    stream.ready = {"site": True}
    stream.guard = SiteGuard(viewer)
    stream.channels = [site_channel(), user_channel(viewer.user.pk)]
    return stream
