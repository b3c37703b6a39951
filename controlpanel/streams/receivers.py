"""What ends a user's open streams besides a member removal (channels.member_removed): a
logout (that session's streams), a deactivation (all of the user's), a site admin made an
ordinary user (their site stream; their project streams check and stay). Connected by
AccountsConfig.ready(); each message leaves once its transaction commits."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_save
from django.dispatch import receiver

from controlpanel.streams import channels


@receiver(user_logged_out, dispatch_uid="streams-logout")
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    session = getattr(request, "session", None)
    if user is not None and session is not None and session.session_key:
        channels.access_changed(user_id=user.pk, session_key=session.session_key)


@receiver(post_save, sender=get_user_model(), dispatch_uid="streams-deactivated")
def _saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    fields = kwargs.get("update_fields")
    if created:
        return
    if not instance.is_active and (fields is None or "is_active" in fields):
        channels.access_changed(user_id=instance.pk)
    elif not instance.is_staff and (fields is None or "is_staff" in fields):
        channels.access_changed(user_id=instance.pk)  # a site admin no more: the site stream
