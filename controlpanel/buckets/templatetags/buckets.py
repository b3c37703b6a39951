"""Filters for the bucket pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """`just now`, `3 minutes ago`, `2 hours ago` (the largest unit only)."""
    if moment is None:
        return ""
    now = timezone.now()
    if now - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment, now, depth=1)} ago"
