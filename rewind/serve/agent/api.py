"""LangGraph's Agent Server API on `rewind serve`, under /langgraph (docs/agent-server.md).

    get_client(url="http://127.0.0.1:8710/langgraph")   # langgraph-sdk, unchanged but for the URL

Under a prefix of its own because Rewind's own `POST /runs` (rewind start) and the Agent
Server's stateless `POST /runs` would share a path: a client pointed at /langgraph speaks
only the Agent Server API, and every Rewind route keeps its path.

Assistants are graphs named MODULE:ATTR (what `rewind start --graph` takes). Threads and
runs: service.Agent. Each request's caller is the auth hook's answer (identity.py).
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from pydantic import BaseModel, ConfigDict
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rewind.serve.agent.identity import AuthRequest, Refused, identify, load_hook
from rewind.serve.agent.service import Agent
from rewind.serve.backends import Backends
from rewind.serve.errors import HTTPError
from rewind.serve.routes import Answer, Endpoint, Group, Param, error_answers
from workflows.vocabulary.errors import UsageError

PREFIX = "/langgraph"
PING_S = 15


class Body(BaseModel):
    """An Agent Server request body: LangGraph's own fields (docs/agent-server.md says which are read)."""

    model_config = ConfigDict(extra="allow")


def _agent(backends: Backends) -> Agent:
    agent = backends.__dict__.get("_agent_server")
    if agent is None:
        agent = Agent(backends, hooked=bool(backends.settings.serve_auth))
        backends.__dict__["_agent_server"] = agent
    return agent


def on_start(backends: Backends) -> None:
    """At the server's start: the enqueued runs still to start and the webhooks still to call go on."""
    agent = _agent(backends)
    agent.background(agent.resume_background())


async def _who(request: Request, backends: Backends) -> str | None:
    hook = backends.__dict__.get("_agent_hook")
    if hook is None and backends.settings.serve_auth:
        hook = load_hook(backends.settings.serve_auth)
        backends.__dict__["_agent_hook"] = hook
    asked = AuthRequest(request.method, request.url.path, {k.lower(): v for k, v in request.headers.items()},
                        dict(request.query_params))
    try:
        return await identify(hook, asked)
    except Refused as exc:
        raise HTTPError(exc.status, str(exc)) from None


def _fields(body: Body | None) -> dict[str, Any]:
    return body.model_dump() if body is not None else {}


# -- assistants -----------------------------------------------------------------------------
def _assistant(graph_id: str) -> dict[str, Any]:
    return {"assistant_id": graph_id, "graph_id": graph_id, "name": graph_id, "description": None, "config": {},
            "context": {}, "metadata": {"created_by": "rewind"}, "version": 1,
            "created_at": "1970-01-01T00:00:00+00:00", "updated_at": "1970-01-01T00:00:00+00:00"}


async def assistant_route(request: Request, backends: Backends, _body: Any) -> Response:
    await _who(request, backends)
    graph_id = request.path_params["assistant_id"]
    if ":" not in graph_id:
        raise UsageError(f"assistant {graph_id!r}: an assistant here is a graph named MODULE:ATTR")
    return JSONResponse(_assistant(graph_id))


async def _offered(backends: Backends) -> dict[str, Any]:
    """The graphs the workers on the task queue offer: {MODULE:ATTR: their input's JSON schema}."""
    from checkpoint_bridge.temporal.runs import describe_tools

    described = await describe_tools(await backends.client(), backends.settings.task_queue, [])
    return {p.name: p.parameters for p in described.pipelines if ":" in p.name}


async def search_assistants_route(request: Request, backends: Backends, body: Body) -> Response:
    """Every graph the workers offer."""
    await _who(request, backends)
    asked = _fields(body)
    graphs = sorted(await _offered(backends))
    if asked.get("graph_id"):
        graphs = [g for g in graphs if g == asked["graph_id"]]
    offset, limit = int(asked.get("offset") or 0), int(asked.get("limit") or 10)
    return JSONResponse([_assistant(g) for g in graphs[offset:offset + limit]])


async def schemas_route(request: Request, backends: Backends, _body: Any) -> Response:
    await _who(request, backends)
    graph_id = request.path_params["assistant_id"]
    offered = await _offered(backends)
    if graph_id not in offered:
        from workflows.vocabulary.errors import RunNotFoundError

        raise RunNotFoundError(f"no worker on task queue {backends.settings.task_queue!r} offers graph {graph_id!r}; "
                               "start one with the tools module that defines it (rewind worker --tool-modules MODULE)")
    return JSONResponse({"graph_id": graph_id, "input_schema": offered[graph_id], "output_schema": None,
                         "state_schema": None, "config_schema": None, "context_schema": None})


# -- threads --------------------------------------------------------------------------------
async def create_thread_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread = await agent.create_thread(await _who(request, backends), asked.get("thread_id"),
                                       asked.get("metadata") or {}, asked.get("if_exists"))
    return JSONResponse(await agent.thread_json(thread))


async def get_thread_route(request: Request, backends: Backends, _body: Any) -> Response:
    agent = _agent(backends)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    return JSONResponse(await agent.thread_json(thread))


async def delete_thread_route(request: Request, backends: Backends, _body: Any) -> Response:
    agent = _agent(backends)
    await agent.delete_thread(await agent.thread(request.path_params["thread_id"], await _who(request, backends)))
    return Response(status_code=204)


async def search_threads_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    found = await agent.threads(await _who(request, backends))
    metadata = asked.get("metadata") or {}
    found = [t for t in found if all(t.metadata.get(k) == v for k, v in metadata.items())]
    offset, limit = int(asked.get("offset") or 0), int(asked.get("limit") or 10)
    answers = [await agent.thread_json(t) for t in found[offset:offset + limit]]
    if asked.get("status"):
        answers = [a for a in answers if a["status"] == asked["status"]]
    return JSONResponse(answers)


async def state_route(request: Request, backends: Backends, _body: Any) -> Response:
    agent = _agent(backends)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    return JSONResponse(await agent.state(thread))


async def state_at_route(request: Request, backends: Backends, body: Body | None) -> Response:
    """GET .../state/{checkpoint_id}, or POST .../state/checkpoint with {"checkpoint": {...}} (RemoteGraph's)."""
    agent = _agent(backends)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    checkpoint = request.path_params.get("checkpoint_id") or (_fields(body).get("checkpoint") or {}).get("checkpoint_id")
    return JSONResponse(await agent.state_at(thread, checkpoint))


async def history_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    return JSONResponse(await agent.history(thread, int(asked.get("limit") or 10)))


async def update_state_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    checkpoint = asked.get("checkpoint_id") or (asked.get("checkpoint") or {}).get("checkpoint_id")
    values = asked.get("values")
    if values is not None and not isinstance(values, dict):
        raise UsageError("update_state: give values as a JSON object of the graph's channels")
    return JSONResponse(await agent.update_state(thread, values or {}, asked.get("as_node"), checkpoint))


# -- runs -----------------------------------------------------------------------------------
def _sse(parts: AsyncIterator[tuple[str, Any, str | None]]) -> AsyncIterator[ServerSentEvent]:
    async def frames() -> AsyncIterator[ServerSentEvent]:
        async for name, data, ident in parts:
            yield ServerSentEvent(data=json.dumps(data, default=str), event=name, id=ident)

    return frames()


async def _thread_for_run(request: Request, backends: Backends, asked: dict[str, Any]) -> Any:
    agent, who = _agent(backends), await _who(request, backends)
    thread_id = request.path_params["thread_id"]
    if asked.get("if_not_exists") == "create":
        from workflows.vocabulary.errors import RunNotFoundError

        try:
            return await agent.thread(thread_id, who), who
        except RunNotFoundError:
            return await agent.create_thread(who, thread_id, {}, "do_nothing"), who
    return await agent.thread(thread_id, who), who


async def create_run_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread, who = await _thread_for_run(request, backends, asked)
    run = await agent.start(thread, who, asked)
    return JSONResponse(await agent.run_json(run))


async def stream_run_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread, who = await _thread_for_run(request, backends, asked)
    run = await agent.start(thread, who, asked)
    parts = agent.parts(run, asked.get("stream_mode"), bool(asked.get("stream_subgraphs")))
    # Where the client reconnects (with its Last-Event-ID) when the stream drops: langgraph-sdk
    # resolves it against the URL it was given (…/langgraph), so the path is the API's own.
    return EventSourceResponse(_sse(parts), ping=PING_S, headers={
        "Location": f"/threads/{thread.thread_id}/runs/{run.run_id}/stream",
        "Content-Location": f"/threads/{thread.thread_id}/runs/{run.run_id}"})


async def wait_run_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, asked = _agent(backends), _fields(body)
    thread, who = await _thread_for_run(request, backends, asked)
    run = await agent.start(thread, who, asked)
    return JSONResponse(await agent.wait(thread, run), headers={
        "Content-Location": f"/threads/{thread.thread_id}/runs/{run.run_id}"})


# -- stateless runs: a thread of their own, forgotten by the API at their end unless on_completion="keep" --
async def _stateless(request: Request, backends: Backends, asked: dict[str, Any]) -> Any:
    agent, who = _agent(backends), await _who(request, backends)
    keep = asked.get("on_completion") or "delete"
    if keep not in ("delete", "keep"):
        raise UsageError(f"on_completion {keep!r}: say delete or keep")
    thread = await agent.create_thread(who, None, {}, None)
    return agent, thread, await agent.start(thread, who, asked), keep == "keep"


async def _forget_after(agent: Agent, thread: Any, run: Any) -> None:
    """The stateless run's thread, forgotten by the API once the run has ended (its Rewind run stays)."""
    async for _part in agent.parts(run, ["values"], False):
        pass
    await agent.delete_thread(thread)


async def stateless_create_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, thread, run, keep = await _stateless(request, backends, _fields(body))
    if not keep:
        agent.background(_forget_after(agent, thread, run))
    return JSONResponse(await agent.run_json(run))


async def stateless_stream_route(request: Request, backends: Backends, body: Body) -> Response:
    asked = _fields(body)
    agent, thread, run, keep = await _stateless(request, backends, asked)

    async def parts() -> AsyncIterator[tuple[str, Any, str | None]]:
        async for part in agent.parts(run, asked.get("stream_mode"), bool(asked.get("stream_subgraphs"))):
            yield part
        if not keep:
            await agent.delete_thread(thread)

    return EventSourceResponse(_sse(parts()), ping=PING_S)


async def stateless_wait_route(request: Request, backends: Backends, body: Body) -> Response:
    agent, thread, run, keep = await _stateless(request, backends, _fields(body))
    values = await agent.wait(thread, run)
    if not keep:
        await agent.delete_thread(thread)
    return JSONResponse(values)


async def _run_of(request: Request, backends: Backends) -> Any:
    agent = _agent(backends)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    return thread, await agent.run(thread, request.path_params["run_id"])


async def get_run_route(request: Request, backends: Backends, _body: Any) -> Response:
    _thread, run = await _run_of(request, backends)
    return JSONResponse(await _agent(backends).run_json(run))


async def list_runs_route(request: Request, backends: Backends, _body: Any) -> Response:
    agent = _agent(backends)
    thread = await agent.thread(request.path_params["thread_id"], await _who(request, backends))
    runs = list(reversed(await agent.records.runs_of(thread.thread_id)))
    offset, limit = int(request.query_params.get("offset") or 0), int(request.query_params.get("limit") or 10)
    answers = [await agent.run_json(r) for r in runs[offset:offset + limit]]
    if request.query_params.get("status"):
        answers = [a for a in answers if a["status"] == request.query_params["status"]]
    return JSONResponse(answers)


async def join_route(request: Request, backends: Backends, _body: Any) -> Response:
    thread, run = await _run_of(request, backends)
    return JSONResponse(await _agent(backends).wait(thread, run))


async def join_stream_route(request: Request, backends: Backends, _body: Any) -> Response:
    _thread, run = await _run_of(request, backends)
    after = request.headers.get("last-event-id") or None
    modes = request.query_params.getlist("stream_mode") or run.kwargs.get("stream_mode")
    parts = _agent(backends).parts(run, modes, False, after)
    return EventSourceResponse(_sse(parts), ping=PING_S)


async def cancel_route(request: Request, backends: Backends, _body: Any) -> Response:
    _thread, run = await _run_of(request, backends)
    action = request.query_params.get("action") or "interrupt"
    if action != "interrupt":
        raise UsageError(f"cancel action {action!r} is not built yet; only 'interrupt' is (docs/agent-server.md)")
    await _agent(backends).cancel(run)
    return Response(status_code=202)


THREAD = Param("thread_id", "path", "the thread's id (its Rewind run's id)", required=True)
RUN_ID = Param("run_id", "path", "the API run's id", required=True)
_JSON = (Answer(200, "as LangGraph's Agent Server answers", {"type": "object"}), *error_answers(400, 404, 409, 503))


def _e(method: str, path: str, handler: Any, summary: str, *, body: bool = False, params: tuple[Param, ...] = (),
       answers: tuple[Answer, ...] = _JSON, operation_id: str = "") -> Endpoint:
    return Endpoint(method, path, handler, summary, params=params, body_model=Body if body else None, answers=answers,
                    operation_id=operation_id)


_STREAM = (Answer(200, "stream parts as server-sent events", {"type": "string"}, "text/event-stream"),
           *error_answers(400, 404, 409, 503))

GROUP = Group(
    tag="agent-server", prefix=PREFIX,
    description="LangGraph's Agent Server API (langgraph-sdk's get_client(url=.../langgraph); docs/agent-server.md)",
    endpoints=(
        _e("POST", "/assistants/search", search_assistants_route, "The graphs the workers offer", body=True,
           operation_id="lgSearchAssistants"),
        _e("GET", "/assistants/{assistant_id}", assistant_route, "A graph (MODULE:ATTR) as an assistant",
           params=(Param("assistant_id", "path", "MODULE:ATTR", required=True),), operation_id="lgGetAssistant"),
        _e("GET", "/assistants/{assistant_id}/schemas", schemas_route, "A graph's input schema, as its worker says",
           params=(Param("assistant_id", "path", "MODULE:ATTR", required=True),), operation_id="lgAssistantSchemas"),
        _e("POST", "/threads", create_thread_route, "Create a thread (a Rewind run once it runs)", body=True,
           operation_id="lgCreateThread"),
        _e("POST", "/threads/search", search_threads_route, "The caller's threads, newest first", body=True,
           operation_id="lgSearchThreads"),
        _e("GET", "/threads/{thread_id}", get_thread_route, "A thread", params=(THREAD,), operation_id="lgGetThread"),
        _e("DELETE", "/threads/{thread_id}", delete_thread_route, "Forget a thread (its Rewind run stays)",
           params=(THREAD,), operation_id="lgDeleteThread"),
        _e("GET", "/threads/{thread_id}/state", state_route, "The thread's state at its head", params=(THREAD,),
           operation_id="lgThreadState"),
        _e("GET", "/threads/{thread_id}/state/{checkpoint_id}", state_at_route, "The thread's state at a checkpoint",
           params=(THREAD, Param("checkpoint_id", "path", "RUN:BRANCH:STEP", required=True)),
           operation_id="lgThreadStateAt"),
        _e("POST", "/threads/{thread_id}/state/checkpoint", state_at_route,
           "The thread's state at {\"checkpoint\": {\"checkpoint_id\": ...}} (the head without one)", body=True,
           params=(THREAD,), operation_id="lgThreadStateAtCheckpoint"),
        _e("POST", "/threads/{thread_id}/state", update_state_route,
           "Set channels at a checkpoint: the next run forks there (`rewind fork --set`)", body=True,
           params=(THREAD,), operation_id="lgUpdateState"),
        _e("POST", "/threads/{thread_id}/history", history_route, "The checkpoints of the thread's line, newest first",
           body=True, params=(THREAD,), operation_id="lgThreadHistory"),
        _e("POST", "/threads/{thread_id}/runs", create_run_route, "Start a run in the background", body=True,
           params=(THREAD,), operation_id="lgCreateRun"),
        _e("POST", "/threads/{thread_id}/runs/stream", stream_run_route, "Start a run and stream it", body=True,
           params=(THREAD,), answers=_STREAM, operation_id="lgStreamRun"),
        _e("POST", "/threads/{thread_id}/runs/wait", wait_run_route, "Start a run and answer its final values",
           body=True, params=(THREAD,), operation_id="lgWaitRun"),
        _e("POST", "/runs", stateless_create_route, "A run on a thread of its own, in the background", body=True,
           operation_id="lgStatelessRun"),
        _e("POST", "/runs/stream", stateless_stream_route, "A run on a thread of its own, streamed", body=True,
           answers=_STREAM, operation_id="lgStatelessStream"),
        _e("POST", "/runs/wait", stateless_wait_route, "A run on a thread of its own; its final values", body=True,
           operation_id="lgStatelessWait"),
        _e("GET", "/threads/{thread_id}/runs", list_runs_route, "The thread's runs, newest first", params=(THREAD,),
           operation_id="lgListRuns"),
        _e("GET", "/threads/{thread_id}/runs/{run_id}", get_run_route, "A run", params=(THREAD, RUN_ID),
           operation_id="lgGetRun"),
        _e("GET", "/threads/{thread_id}/runs/{run_id}/join", join_route, "Wait for a run; its thread's final values",
           params=(THREAD, RUN_ID), operation_id="lgJoinRun"),
        _e("GET", "/threads/{thread_id}/runs/{run_id}/stream", join_stream_route,
           "A run's stream (Last-Event-ID: resume after it)", params=(THREAD, RUN_ID), answers=_STREAM,
           operation_id="lgJoinStream"),
        _e("POST", "/threads/{thread_id}/runs/{run_id}/cancel", cancel_route, "Cancel a run (its checkpoints stay)",
           params=(THREAD, RUN_ID), answers=(Answer(202, "cancellation requested"), *error_answers(400, 404, 503)),
           operation_id="lgCancelRun"),
    ),
)

__all__ = ["GROUP", "PREFIX", "on_start"]
