"""A kind's pages, routed once (`kind_urls`): `/p/<slug>/<plural>/` lists them, `new/` makes
one, and `<name>_id` reaches its detail page, status fragment, log lines, log download, any
page of its own and its action buttons' posts (last: `<slug:action>/` takes any word). The
route names are `<name>-list`, `<name>-new`, `<name>-detail`, ..., the views
`<name>_list`, `<name>_new`, ... in the kind's views module."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from django.urls import URLPattern, path

from controlpanel.engine.registry import KindSpec

# What follows a workload's own address, and the view's (and the route name's) word for it.
ONE_PAGES = (
    ("", "detail"),
    ("status/", "status"),
    ("logs/", "logs"),
    ("logs/download/", "log-download"),
)


def kind_urls(
    kind: KindSpec, views: ModuleType, *, own: Mapping[str, Any] | None = None
) -> list[URLPattern]:
    """The kind's page routes; `own` adds pages under a workload's address (`{"open": view}`
    is `<id>/open/`, named `<name>-open`) before the action route that would take the word."""
    many = f"p/<slug:slug>/{kind.plural}/"
    one = f"{many}<str:{kind.name}_id>/"

    def view(word: str) -> Any:
        return getattr(views, f"{kind.name}_{word.replace('-', '_')}")

    return [
        path(many, view("list"), name=f"{kind.name}-list"),
        path(many + "new/", view("new"), name=f"{kind.name}-new"),
        *(path(one + tail, view(word), name=f"{kind.name}-{word}") for tail, word in ONE_PAGES),
        *(
            path(f"{one}{word}/", page, name=f"{kind.name}-{word}")
            for word, page in (own or {}).items()
        ),
        path(one + "<slug:action>/", view("action"), name=f"{kind.name}-action"),
    ]
