"""The HTTP side of the CLI: one httpx client per invocation, API errors as click errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click
import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
# How the API starts its 404 when a request names no project and the caller has several or
# none (controlpanel/api/scoping.py); the CLI says it with its own flag and variable.
UNNAMED = "Name the project"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class ApiError(click.ClickException):
    """An HTTP failure, shown as `Error: HTTP 404: No such bucket.` with exit code 1."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}" if status else detail)
        self.status = status


def describe(response: httpx.Response, name: Callable[[str], str] = str) -> str:
    """The API's own words for a failure: `detail`, or `key: message` pairs (each key as
    `name` shows it: a command shows the flag the field came from)."""
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase or "error"
    if isinstance(body, dict):
        if "detail" in body:
            detail = body["detail"]  # a list: a service's refusal that names no field
            return " ".join(map(str, detail)) if isinstance(detail, list) else str(detail)
        parts = []
        for key, messages in body.items():
            text = " ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
            parts.append(text if key == "non_field_errors" else f"{name(key)}: {text}")
        return "; ".join(parts) or "error"
    return str(body)


@dataclass
class State:
    """What the root group read (options and AJUSTE_* variables); `ctx.obj` everywhere."""

    url: str = DEFAULT_URL
    token: str | None = None
    project: str | None = None
    output: str = "table"
    transport: httpx.BaseTransport | None = None
    _api: Api | None = field(default=None, repr=False)

    def api(self) -> Api:
        """The API client, made on first use (so `--help` needs no token)."""
        if self._api is None:
            if not self.token:
                raise click.UsageError(
                    "No API token: set AJUSTE_TOKEN (or --token), or run `ajuste login`; "
                    "create one on your settings page or with "
                    "`python manage.py apitoken <username>`."
                )
            self._api = Api(
                url=self.url, token=self.token, project=self.project, transport=self.transport
            )
        return self._api


def state() -> State:
    return click.get_current_context().ensure_object(State)


@dataclass
class Api:
    """Calls /api/v1/... with the bearer token and the project header."""

    url: str
    token: str
    project: str | None = None
    transport: httpx.BaseTransport | None = None
    _http: httpx.Client | None = field(default=None, repr=False)
    # The Link header of the last answer by rel (the logs name their live stream there).
    links: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            if self.project:
                headers["X-Ajuste-Project"] = self.project
            self._http = httpx.Client(
                base_url=self.url.rstrip("/") + "/api/v1/",
                headers=headers,
                timeout=TIMEOUT,
                transport=self.transport,
            )
        return self._http

    def call(
        self, method: str, path: str, *, name: Callable[[str], str] = str, **kwargs: Any
    ) -> Any:
        """JSON of a successful answer (None for 204); ApiError otherwise (see describe)."""
        try:
            response = self.http.request(method, path.lstrip("/"), **kwargs)
        except httpx.TransportError as error:
            raise ApiError(0, f"cannot reach {self.url}: {error}") from None
        if response.status_code >= 400:
            detail = describe(response, name)
            if response.status_code == 404 and not self.project and detail.startswith(UNNAMED):
                raise click.UsageError(self._name_the_project())
            raise ApiError(response.status_code, detail)
        self.links = {rel: link["url"] for rel, link in response.links.items() if rel}
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def _name_the_project(self) -> str:
        """The API's 'name the project' said in the CLI's words, with the projects to pick."""
        try:
            page = self.http.get("projects/").json()
            slugs = [project["slug"] for project in page["results"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            slugs = []
        known = f" Yours: {', '.join(slugs)}." if slugs else " You are in no project yet."
        example = slugs[0] if slugs else "<slug>"
        return (
            f"Name the project: `ajuste -p {example} ...` (--project, before the command), "
            f"or export AJUSTE_PROJECT={example}." + known
        )

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict[str, Any], name: Callable[[str], str] = str) -> Any:
        return self.call("POST", path, json=body, name=name)

    def paginate(self, path: str, **params: Any) -> list[Any]:
        """Every item of a paginated list (`results` + `next`)."""
        items: list[Any] = []
        page = self.get(path, **params)
        while True:
            items.extend(page["results"])
            if not page.get("next"):
                return items
            page = self.call("GET", page["next"])

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
