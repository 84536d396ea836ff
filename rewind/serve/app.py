"""The `rewind serve` application: every group of routes, behind the API key gate.

    build_app(settings) -> an ASGI app (Starlette), whose routes are the GROUPS' endpoints

Each group is a module with a `GROUP` (rewind/serve/routes.py): Rewind's runs (runs.py),
their events (stream.py), the live page (page.py), the OpenAPI document and its page
(docs.py). The app turns the groups' endpoints into Starlette routes (one per method and
path; endpoints that share both are told apart by the request's Accept header), checks
each body against its model before the handler runs, and answers every error as
`{"error": "one line"}` (errors.py). A new group of routes is a module and one line here.
"""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewind.serve import docs, page, runs, stream
from rewind.serve.agent import api as agent_server
from rewind.serve.agent.identity import load_hook
from rewind.serve.auth import Gate, without_key
from rewind.serve.backends import Backends
from rewind.serve.errors import HTTPError, answer_error, from_starlette
from rewind.serve.routes import Endpoint, Group
from rewind.settings.config import Settings

log = logging.getLogger("rewind.serve")

# The groups of routes, in the order the OpenAPI document lists them.
GROUPS: tuple[Group, ...] = (runs.GROUP, stream.GROUP, page.GROUP, agent_server.GROUP, docs.GROUP)


def build_app(settings: Settings, groups: tuple[Group, ...] = GROUPS) -> ASGIApp:
    """The ASGI app `rewind serve` runs: `groups`' routes, behind REWIND_API_KEY when it is set."""
    load_hook(settings.serve_auth)  # REWIND_SERVE_AUTH that does not import: one line now, not every request
    backends = Backends(settings)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if agent_server.GROUP in groups:
            agent_server.on_start(backends)
        try:
            yield
        finally:
            await backends.aclose()

    if settings.serve_auth:
        # The hook names who asks of the Agent Server API; Rewind's own routes know no owner yet, so
        # with a hook they are refused: no identity reads another's run through them.
        groups = tuple(g if g in (agent_server.GROUP, docs.GROUP) else _refused(g) for g in groups)
    app = Starlette(routes=starlette_routes(groups, backends), lifespan=lifespan,
                    exception_handlers={HTTPException: _starlette_error})  # type: ignore[dict-item]
    app.state.groups = groups
    app.state.backends = backends
    return AccessLog(Gate(app, settings.api_key))


def _refused(group: Group) -> Group:
    """`group` with every endpoint answering 403 (REWIND_SERVE_AUTH is set)."""
    from dataclasses import replace

    async def refuse(_request: Any, _backends: Any, _body: Any) -> Response:
        raise HTTPError(403, "REWIND_SERVE_AUTH is set: Rewind's own routes are not served (they know no "
                             "identity); use the Agent Server API under /langgraph, or a rewind serve without the hook")

    return replace(group, endpoints=tuple(replace(e, handler=refuse, body_model=None) for e in group.endpoints))


def starlette_routes(groups: tuple[Group, ...], backends: Backends) -> list[Route]:
    """One Starlette route per method and path of `groups`' endpoints."""
    by_route: dict[tuple[str, str], list[Endpoint]] = {}
    for group in groups:
        for endpoint in group.endpoints:
            by_route.setdefault((endpoint.method, group.prefix + endpoint.path), []).append(endpoint)
    return [Route(path, _dispatcher(endpoints, backends), methods=[method])
            for (method, path), endpoints in by_route.items()]


def chosen(endpoints: list[Endpoint], accept: str) -> Endpoint:
    """The endpoint whose media type the Accept header names (a browser's text/html), else the JSON one."""
    accept = accept.lower()
    for endpoint in endpoints:
        if endpoint.accepts != "application/json" and endpoint.accepts in accept:
            return endpoint
    return next((e for e in endpoints if e.accepts == "application/json"), endpoints[0])


def _dispatcher(endpoints: list[Endpoint], backends: Backends) -> Any:
    async def dispatch(request: Request) -> Response:
        endpoint = chosen(endpoints, request.headers.get("accept", ""))
        try:
            body = await _body(request, endpoint) if endpoint.body_model is not None else None
            return await endpoint.handler(request, backends, body)
        except Exception as exc:  # noqa: BLE001 - every error is one line of JSON (errors.py)
            return answer_error(exc, f"{request.method} {request.url.path}")

    return dispatch


async def _body(request: Request, endpoint: Endpoint) -> Any:
    """The request's JSON body as the endpoint's model (an empty one: {})."""
    assert endpoint.body_model is not None
    raw = await request.body()
    # JSON only, said by its Content-Type: a page of another site can send a text/plain or form body
    # (or none) without asking, but not an application/json one (its browser asks this server first,
    # which says nothing that allows it), so a request with a body is one a page of this server or a
    # client of its own sent.
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise HTTPError(415, f"the body must be JSON with Content-Type: application/json (got {kind or 'none'}); "
                             "curl: -H 'content-type: application/json' -d '{...}'")
    if not raw.strip():
        document: Any = {}
    else:
        try:
            document = json.loads(raw)
        except ValueError as exc:
            raise HTTPError(400, f"the body is not JSON ({exc}); send a JSON object") from None
    if not isinstance(document, dict):
        raise HTTPError(400, f"the body is a JSON {type(document).__name__}; send a JSON object")
    return endpoint.body_model.model_validate(document)


async def _starlette_error(request: Request, exc: HTTPException) -> Response:
    return from_starlette(exc.status_code, exc.detail)


class AccessLog:
    """One line per request on the log: method, path, query (without api_key), status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                query = without_key(scope.get("query_string", b""))
                log.info("%s %s%s %d", scope["method"], scope["path"], f"?{query}" if query else "", status)
            await send(message)

        await self.app(scope, receive, sending)


__all__ = ["GROUPS", "AccessLog", "build_app", "chosen", "starlette_routes"]
