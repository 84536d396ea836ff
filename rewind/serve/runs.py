"""Rewind's own routes on runs: list, start, status, decide a waiting call, fork.

Each is a command of the command line over HTTP, built on the same client API
(rewind/client.py, rewind/starting.py, checkpoint_bridge/views/runs.py) and answering the
JSON its `--json` prints:

    GET  /runs                              rewind runs [--state ...]
    POST /runs                              rewind start (a task, a pipeline or a graph)
    GET  /runs/{run}                        rewind status RUN (a browser gets the live page)
    POST /runs/{run}/calls/{call}/approve   rewind approve RUN CALL
    POST /runs/{run}/calls/{call}/reject    rewind reject RUN CALL --reason TEXT
    POST /runs/{run}/forks                  rewind fork RUN --step N --branch NAME
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from checkpoint_bridge.views.runs import RunList, RunQuery
from rewind.client import RunView, approve, fork, reject, run_status
from rewind.serve.backends import Backends
from rewind.serve.routes import BRANCH, RUN, Answer, Endpoint, Group, Param, branch_of, error_answers, run_of
from rewind.starting import StartRequest, start
from rewind.stores import check_stores
from workflows.vocabulary.contracts import ApprovalRecord, RunLimits
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id

# How a JSON body spells the fields of a start (rewind.starting.StartRequest's errors).
BODY_NAMES = {key: f'"{key}"' for key in ("task", "pipeline", "graph", "input", "agent", "system_prompt", "tools")}
# Who decided, when a decision over HTTP does not say (`rewind approve` says the OS user).
DECIDED_OVER_HTTP = "http"


# -- GET /runs ------------------------------------------------------------------------------
_QUERY_FIELDS = ("state", "since", "until", "agent", "tool_errors", "min_cost", "limit")


async def list_runs_route(request: Request, backends: Backends, _body: Any) -> Response:
    from checkpoint_bridge.views.runs import list_runs

    unknown = sorted(set(request.query_params) - set(_QUERY_FIELDS) - {"api_key"})
    if unknown:
        raise UsageError(f"GET /runs takes no {', '.join(unknown)}; it takes {', '.join(_QUERY_FIELDS)}")
    query = RunQuery.model_validate({k: v for k, v in request.query_params.items() if k in _QUERY_FIELDS})
    client = await backends.client_or_none()  # Temporal down: the store alone lists (state completed/failed)
    listed = await list_runs(backends.store, client, query)
    return JSONResponse(listed.model_dump(mode="json"))


# -- POST /runs -----------------------------------------------------------------------------
class Started(BaseModel):
    run_id: str
    workflow_id: str
    no_worker: str | None = Field(None, description="set when no worker polls the task queue: the run waits for one")


async def start_route(request: Request, backends: Backends, body: StartRequest) -> Response:
    body.check(BODY_NAMES)  # before Temporal: a body no run could be is a 400 whatever else is down
    await check_stores(backends.settings)
    started = await start(await backends.client(), backends.settings, body, BODY_NAMES)
    answer = Started(run_id=started.run_id, workflow_id=started.handle.id, no_worker=started.no_worker)
    return JSONResponse(answer.model_dump(mode="json"), status_code=201,
                        headers={"Location": f"/runs/{started.run_id}"})


# -- GET /runs/{run} ------------------------------------------------------------------------
async def status_route(request: Request, backends: Backends, _body: Any) -> Response:
    run, branch = run_of(request), branch_of(request)
    client, unreachable = await backends.reach()
    view = await run_status(client, backends.store, run, branch, unreachable=unreachable,
                            temporal_address=backends.settings.temporal_address,
                            task_queue=backends.settings.task_queue)
    return JSONResponse(view.model_dump(mode="json"))


# -- decisions ------------------------------------------------------------------------------
class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branch: str = Field("main", description="the branch the call waits on")
    by: str | None = Field(None, description=f"who decides (default {DECIDED_OVER_HTTP!r})")
    reason: str | None = Field(None, description="why, recorded with the decision")
    arguments: dict[str, Any] | None = Field(None, description="run the call with these arguments instead "
                                                               "(checked against the tool's schema)")
    value: Any = Field(None, description="a graph run's interrupt(): the value it returns in the node (default true)")


class Rejection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(..., description="why: the model reads it as the tool's answer")
    branch: str = Field("main", description="the branch the call waits on")
    by: str | None = Field(None, description=f"who decides (default {DECIDED_OVER_HTTP!r})")


async def approve_route(request: Request, backends: Backends, body: Approval) -> Response:
    run, call = run_of(request), request.path_params["call"]
    validate_id("branch", body.branch)
    record = await approve(await backends.client(), run, call, branch=body.branch, by=body.by or DECIDED_OVER_HTTP,
                           reason=body.reason, arguments=body.arguments, value=body.value)
    return JSONResponse(record.model_dump(mode="json"))


async def reject_route(request: Request, backends: Backends, body: Rejection) -> Response:
    run, call = run_of(request), request.path_params["call"]
    validate_id("branch", body.branch)
    if not body.reason.strip():
        raise UsageError('"reason" must say why: the model receives it as the tool result')
    record = await reject(await backends.client(), run, call, branch=body.branch, by=body.by or DECIDED_OVER_HTTP,
                          reason=body.reason)
    return JSONResponse(record.model_dump(mode="json"))


# -- forks ----------------------------------------------------------------------------------
class ForkRequest(BaseModel):
    """`rewind fork RUN --step N --branch NAME [...]` as a JSON body."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(..., ge=0, description="the checkpoint to fork from (the step column of `rewind tree`)")
    branch: str = Field(..., description="name of the new branch")
    from_branch: str = Field("main", description="the branch whose checkpoint it is, as it is now")
    system_prompt: str | None = Field(None, description="the new branch's system prompt (an agent run)")
    model: str | None = Field(None, description="the new branch's model (a pipeline: every call's)")
    models: dict[str, str] | None = Field(None, description="a pipeline's model calls of a label: {label: model}")
    prompts: dict[str, str] | None = Field(None, description="a pipeline's model calls of a label get this system "
                                                             "prompt: {label: text}")
    tools: list[str] | None = Field(None, description="tool names for the new branch")
    variables: dict[str, Any] | None = Field(None, description="agent variables to set (a pipeline's ctx.state keys)")
    subagents: dict[str, dict[Literal["model", "system_prompt"], str]] | None = Field(
        None, description="what a sub-agent runs with on the new branch: {agent: {model | system_prompt: value}}")
    max_steps: int | None = Field(None, ge=1, description="steps at most, counted from step 0")
    side_effects: Literal["run", "reuse", "dry-run"] = Field("run", description="what the branch's side-effecting "
                                                                                "calls do")


class Forked(BaseModel):
    run_id: str
    branch: str
    workflow_id: str
    fork_point: str


async def fork_route(request: Request, backends: Backends, body: ForkRequest) -> Response:
    run = run_of(request)
    result = await fork(
        await backends.client(), backends.settings, backends.store, run, body.step, branch=body.branch,
        from_branch=body.from_branch, system_prompt=body.system_prompt, model=body.model,
        limits=RunLimits(max_steps=body.max_steps) if body.max_steps else None, tools=body.tools,
        variables=body.variables or {}, subagent_overrides=body.subagents or None, side_effects=body.side_effects,
        prompts=body.prompts or None, models=body.models or None,
    )
    answer = Forked(run_id=result.run_id, branch=result.branch, workflow_id=result.workflow_id,
                    fork_point=result.fork_point)
    return JSONResponse(answer.model_dump(mode="json"), status_code=201,
                        headers={"Location": f"/runs/{result.run_id}?branch={result.branch}"})


CALL = Param("call", "path", "the waiting tool call's id (GET /runs/{run} lists them under "
                             "status.pending_approvals)", required=True)
_LIST_PARAMS = (
    Param("state", "query", "only runs in this state", {"type": "string", "enum": ["running", "waiting", "paused",
                                                                                     "completed", "failed",
                                                                                     "cancelled", "stuck"]}),
    Param("since", "query", "only runs started at or after this time (ISO 8601)", {"type": "string",
                                                                                  "format": "date-time"}),
    Param("until", "query", "only runs started before this time; the next page is next_until",
          {"type": "string", "format": "date-time"}),
    Param("agent", "query", "only runs of this declared agent or pipeline"),
    Param("tool_errors", "query", "only runs with a tool call that failed after its retries", {"type": "boolean"}),
    Param("min_cost", "query", "only runs that cost at least this many USD", {"type": "number"}),
    Param("limit", "query", "at most this many runs (default 50)", {"type": "integer", "minimum": 1}),
)

GROUP = Group(
    tag="runs", description="Rewind's runs: list, start, status, approvals, forks (what the command line does)",
    endpoints=(
        Endpoint("GET", "/runs", list_runs_route, "List runs, newest first (`rewind runs`)",
                 "Temporal's visibility joined with the checkpoint store; while Temporal does not answer, the store "
                 "alone (state completed, failed or unfinished).",
                 params=_LIST_PARAMS, answers=(Answer(200, "the runs", RunList), *error_answers(400, 503)),
                 operation_id="listRuns"),
        Endpoint("POST", "/runs", start_route, "Start a run (`rewind start`)",
                 "A task (the agent loop), a pipeline with its input, or a graph with its input.",
                 body_model=StartRequest,
                 answers=(Answer(201, "started", Started), *error_answers(400, 409, 503)), operation_id="startRun"),
        Endpoint("GET", "/runs/{run}", status_route, "A run's state (`rewind status --json`)",
                 "Live while it runs, from its result or its newest checkpoint after. A browser (Accept: text/html) "
                 "gets the live page instead.",
                 params=(RUN, BRANCH), answers=(Answer(200, "the run's state", RunView), *error_answers(400, 404, 503)),
                 operation_id="getRun"),
        Endpoint("POST", "/runs/{run}/calls/{call}/approve", approve_route,
                 "Let a tool call that waits for approval run (`rewind approve`)", params=(RUN, CALL),
                 body_model=Approval,
                 answers=(Answer(200, "the decision as recorded", ApprovalRecord), *error_answers(400, 404, 409, 503)),
                 operation_id="approveCall"),
        Endpoint("POST", "/runs/{run}/calls/{call}/reject", reject_route,
                 "Refuse a tool call that waits for approval (`rewind reject`); the model gets the reason",
                 params=(RUN, CALL), body_model=Rejection,
                 answers=(Answer(200, "the decision as recorded", ApprovalRecord), *error_answers(400, 404, 409, 503)),
                 operation_id="rejectCall"),
        Endpoint("POST", "/runs/{run}/forks", fork_route,
                 "Start a new branch of a run from one of its checkpoints (`rewind fork`)", params=(RUN,),
                 body_model=ForkRequest,
                 answers=(Answer(201, "the new branch, started", Forked), *error_answers(400, 404, 409, 503)),
                 operation_id="forkRun"),
    ),
)


__all__ = ["GROUP", "Approval", "ForkRequest", "Forked", "Rejection", "Started"]
