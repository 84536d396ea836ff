"""The live page: GET /runs/{run} in a browser is the run as `rewind view` draws it,
drawn again as the run goes on.

The page is `rewind view`'s own (checkpoint_bridge/views/viewer.py and viewer_page.html:
the tree, the steps, their messages and tool calls, the comparisons), with a live part
(live_page.html, this room's package data) added at its end: a panel of the calls in
flight (the model's text as it streams, tool calls, approvals, with buttons that decide
them) and a log of the events, fed by an EventSource on GET /runs/{run}/events. At each
checkpoint the panel fetches GET /runs/{run}/view (the data `rewind view` embeds) and the
viewer draws the run again with it, keeping the step in view (the newest one, if it was).

A reload picks up where the page was: the panel keeps the cursor of the last checkpoint
it was told of in the tab's sessionStorage and opens the stream after it. What came
before it is drawn from the store; every durable event after it comes once (a step's
calls not yet recorded), and a call in flight is told again from its attempt's start. Nothing is loaded from anywhere but this server: the
page's Content-Security-Policy allows its own scripts (by hash) and requests to its origin.
"""

from __future__ import annotations

from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from checkpoint_bridge.views.viewer import build_view, empty_view, render_page, script_json
from rewind.serve.backends import Backends
from rewind.serve.routes import BRANCH, RUN, Answer, Endpoint, Group, branch_of, error_answers, run_of
from workflows.vocabulary.errors import RunNotFoundError

_LIVE = "live_page.html"
_CONFIG = "__REWIND_LIVE_CONFIG__"


def live_markup(config: dict[str, Any]) -> str:
    """The live part of the page, configured (its script and style stay the same bytes: their hashes)."""
    template = resources.files("rewind.serve").joinpath(_LIVE).read_text(encoding="utf-8")
    return template.replace(_CONFIG, script_json(config))


async def _view(backends: Backends, run: str, branch: str) -> dict[str, Any]:
    """What `rewind view` draws of the run; a run Temporal has and the store not yet: nothing drawn yet."""
    try:
        return await build_view(backends.store, run)
    except RunNotFoundError:
        client = await backends.client_or_none()
        if client is None:
            raise
        from rewind.client import run_view

        await run_view(client, run, branch, store=backends.store)  # RunNotFoundError: a 404
        return empty_view(run, backends.store.url)


async def page_route(request: Request, backends: Backends, _body: Any) -> Response:
    run, branch = run_of(request), branch_of(request)
    view = await _view(backends, run, branch)
    base = f"{request.scope.get('root_path', '')}/runs/{quote(run, safe='')}"
    config = {"run_id": run, "branch": branch, "events": f"{base}/events?branch={quote(branch, safe='')}",
              "view": f"{base}/view", "calls": f"{base}/calls/",
              "status": f"{base}?branch={quote(branch, safe='')}"}
    page = render_page(view, live=live_markup(config))
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})


async def view_route(request: Request, backends: Backends, _body: Any) -> Response:
    run, branch = run_of(request), branch_of(request)
    return JSONResponse(await _view(backends, run, branch), headers={"Cache-Control": "no-store"})


GROUP = Group(
    tag="live page", description="A run in a browser, as `rewind view` draws it, drawn again as its events come",
    endpoints=(
        Endpoint("GET", "/runs/{run}", page_route, "The live page of a run (a browser: Accept text/html)",
                 "The run as `rewind view` draws it, with the calls in flight (the model's text as it streams, tool "
                 "calls, approvals to decide) and drawn again at each checkpoint. A reload resumes its stream.",
                 params=(RUN, BRANCH), accepts="text/html",
                 answers=(Answer(200, "the page", {"type": "string"}, "text/html"), *error_answers(400, 404, 503))),
        Endpoint("GET", "/runs/{run}/view", view_route, "The data `rewind view` draws a run from",
                 "Branches, every checkpoint as what it adds, every pair of branches compared (format "
                 "rewind.view/v1); what the live page draws again at each checkpoint.",
                 params=(RUN, BRANCH), answers=(Answer(200, "the view's data", {"type": "object"}),
                                                *error_answers(400, 404, 503)),
                 operation_id="runView"),
    ),
)

__all__ = ["GROUP", "live_markup"]
