"""Routes as data: what every group of routes hands the app (rewind/serve/app.py).

A group is a module with a `GROUP` (its endpoints, the prefix they live under and the tag
the OpenAPI document files them under). An endpoint says its method and path, its handler,
and what the document says of it: its parameters, its body (a pydantic model, checked
before the handler runs), its answers. The app turns the same data into Starlette routes
and into /openapi.json, so the document cannot drift from what is served. A later group
(LangGraph's Agent Server API, issue 60) is one more module and one more line in
app.GROUPS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal

from pydantic import BaseModel

from workflows.vocabulary.ids import validate_id

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from rewind.serve.backends import Backends


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter, as the OpenAPI document lists it."""

    name: str
    where: Literal["path", "query", "header", "cookie"]
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Answer:
    """One answer of an endpoint: its status, what it means, and its body's type (a pydantic
    model, or a JSON schema) under its media type."""

    status: int
    description: str
    model: type[BaseModel] | dict[str, Any] | None = None
    media_type: str = "application/json"


Handler = Callable[["Request", "Backends", Any], Awaitable["Response"]]


@dataclass(frozen=True)
class Endpoint:
    """One method on one path. `handler(request, backends, body)`: `body` is the request's
    JSON validated as `body_model` (None when the endpoint takes none). `accepts`: an
    endpoint that shares its method and path with another answers the requests whose Accept
    header prefers this media type (the live page and the JSON status are both GET /runs/{run})."""

    method: str
    path: str
    handler: Handler
    summary: str
    description: str = ""
    params: tuple[Param, ...] = ()
    body_model: type[BaseModel] | None = None
    answers: tuple[Answer, ...] = ()
    accepts: str = "application/json"
    operation_id: str = ""


@dataclass(frozen=True)
class Group:
    """A module's routes: under `prefix`, filed under `tag` in the OpenAPI document."""

    tag: str
    description: str
    endpoints: tuple[Endpoint, ...]
    prefix: str = ""


# Parameters many endpoints share.
RUN = Param("run", "path", "the run's id (as `rewind start` or POST /runs gave it)", required=True)
BRANCH = Param("branch", "query", "the branch (default main; a fork's name)")


def run_of(request: Request) -> str:
    """The run a route's path names, checked (a 400 for an id no run can have)."""
    run = request.path_params["run"]
    validate_id("run", run)
    return run


def branch_of(request: Request) -> str:
    """The branch `?branch=` names (main by default), checked."""
    branch = request.query_params.get("branch") or "main"
    validate_id("branch", branch)
    return branch


def error_answers(*statuses: int) -> tuple[Answer, ...]:
    """The error answers an endpoint can give: every one is `{"error": "one line"}`."""
    from rewind.serve.errors import ERROR_MEANINGS, ErrorBody

    return tuple(Answer(status, ERROR_MEANINGS[status], ErrorBody) for status in statuses)


__all__ = ["Answer", "BRANCH", "Endpoint", "Group", "Handler", "Param", "RUN", "branch_of", "error_answers", "run_of"]
