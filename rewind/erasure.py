"""`rewind delete` and `rewind gc`: a run erased from every place it lives.

    Temporal          every workflow of the run (each branch, each revision a rollback
                      made, compensations), every continued-as-new run of each
    REWIND_STORE      runs/<run>/: checkpoints of every branch and revision, packs, markers
    REWIND_PAYLOADS   the transcript segments, tool outputs by reference and Temporal
                      payloads kept outside history that no other run uses, and the
                      run's idempotency records (side-effecting calls' results)
    dev server files  when Temporal is this folder's `rewind server`: the deleted rows
                      are zeroed (secure_delete) and the write-ahead log emptied

What belongs to the run in the shared, content-addressed payload store is read
from the histories (rewind/temporal/history_refs.py): the run's own, and every other
Rewind run's, whose objects stay. So the histories are read before anything
is deleted, and Temporal is deleted last: a deletion that stops part way (a
store down) says what it removed and what is left, and the same command run
again reads the same histories and finishes. Tool schemas stay: they describe
the tools' code, not a run, every run with the same tools shares them, and
workers keep them cached as stored.

Temporal deletes asynchronously; this waits (bounded) until every execution
is gone from the history service and from visibility, and says so if not.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.tools.idempotency import record_key
from activities.model.transcript import segment_bytes, segment_key
from checkpoint_bridge.branches.compensation import compensation_key
from checkpoint_bridge.checkpoints.erasure import (
    PartialDeletion,
    delete_keys,
    delete_run_objects,
    idempotency_keys_in,
    last_checkpoint_at,
    run_object_keys,
)
from checkpoint_bridge.document.layout import parse_key
from checkpoint_bridge.stores import ObjectStore, parse_store_url
from checkpoint_bridge.checkpoints.outputs import OutputStore, output_key
from checkpoint_bridge.checkpoints.store import CheckpointStore
from rewind.settings.config import Settings
from rewind.temporal.history_refs import (
    REWIND_WORKFLOWS,
    Claim,
    Execution,
    References,
    list_executions,
    read_execution,
    read_executions,
)
from rewind.temporal.payloads import workflow_payload_prefix
from workflows.vocabulary.errors import (
    CheckpointError,
    ErasureIncompleteError,
    RewindError,
    RunActiveError,
    RunNotFoundError,
    UsageError,
)
from workflows.vocabulary.ids import validate_id, workflow_id_for
from workflows.vocabulary.wire import LOCAL_PAYLOAD_DRIVER

__all__ = [
    "RunErasure", "ErasureReport", "Plan", "parse_duration", "plan_delete", "plan_gc", "erase", "delete_run", "gc",
    "report_text", "refuse_running", "DELETE_WAIT_S",
]

DELETE_WAIT_S = 120.0
_FORCE_REASON = "rewind delete --force"


class RunErasure(BaseModel):
    """One run's part of a deletion: what went (or, planned, what will go) from where."""

    run_id: str
    state: str = "finished"  # running (a branch runs or waits), finished, archived (only in the store)
    last_checkpoint_at: datetime | None = None
    workflows: list[str] = []  # workflow ids: branches, revisions, compensations
    temporal_executions: int = 0  # with every continued-as-new run
    stopped: list[str] = []  # running workflows that --force terminated first
    checkpoints: int = 0  # objects under runs/<run>/ in REWIND_STORE
    transcript_segments: int = 0
    tool_outputs: int = 0
    temporal_payloads: int = 0  # Temporal payloads kept outside history
    idempotency_records: int = 0
    kept_shared: int = 0  # objects of the payload store other runs use too: kept


class ErasureReport(BaseModel):
    runs: list[RunErasure] = []
    dry_run: bool = False  # a plan: the counts are what the run names, before anything is deleted
    database: str | None = None  # what was done about the Temporal dev server's files
    notes: list[str] = []


@dataclass
class _RunPlan:
    run_id: str
    executions: list[Execution] = field(default_factory=list)
    checkpoint_keys: list[str] = field(default_factory=list)
    last_at: datetime | None = None


@dataclass
class Plan:
    """What a deletion will touch, read before anything changes."""

    runs: dict[str, _RunPlan]
    others: References  # everything the runs that stay name
    sealed_others: list[str] = field(default_factory=list)  # histories of others this client cannot read

    def report(self) -> ErasureReport:
        """The plan as a report (`dry_run`): payload counts are what the run's histories name
        and no other run's does (the deletion may find more stored under its workflows that no
        history names, such as a query's answer, or fewer, already gone)."""
        return ErasureReport(dry_run=True, runs=[_summary(rp, self.others) for rp in self.runs.values()])


def _summary(rp: _RunPlan, others: References | None = None) -> RunErasure:
    refs = _refs_of(rp)
    running = any(e.running for e in rp.executions)
    summary = RunErasure(
        run_id=rp.run_id, state="running" if running else ("finished" if rp.executions else "archived"),
        last_checkpoint_at=rp.last_at, workflows=sorted({e.workflow_id for e in rp.executions}),
        temporal_executions=len(rp.executions), checkpoints=len(rp.checkpoint_keys),
    )
    if others is not None:
        shared = others.digests
        counts = [len(refs.segments - shared), len(refs.outputs - shared),
                  len({c for c in refs.claims if not _shared(c, others)}), len(refs.idempotency - others.idempotency)]
        summary.transcript_segments, summary.tool_outputs, summary.temporal_payloads, summary.idempotency_records = counts
        summary.kept_shared = len(refs.segments) + len(refs.outputs) + len(refs.claims) - sum(counts[:3])
    return summary


def _workflow_ids(rp: _RunPlan) -> list[str]:
    """The run's workflow ids: Temporal's, and those its stored branches name (a run Temporal
    no longer has may still have payloads stored under them)."""
    branches = {parsed.branch_id for parsed in map(parse_key, rp.checkpoint_keys) if parsed is not None}
    return sorted({e.workflow_id for e in rp.executions} | {workflow_id_for(rp.run_id, b) for b in branches | {"main"}})


def _shared(claim: Claim, others: References) -> bool:
    """Whether another run may use the payload of `claim`: it names the same key, or, for a
    key shared by digest (not under a workflow's own id), the same sha256."""
    if claim.key in {c.key for c in others.claims}:
        return True
    return not claim.scoped and claim.digest in others.digests


def _refs_of(rp: _RunPlan) -> References:
    refs = References()
    for e in rp.executions:
        refs.add(e.refs)
    return refs


# -- durations --------------------------------------------------------------

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s` (a number and one unit)."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise UsageError(f"--older-than {text!r} is not a duration; use a number and a unit: 30d, 12h, 90m or 45s")
    value = timedelta(**{_UNITS[match[2]]: float(match[1])})
    if value <= timedelta(0):
        raise UsageError(f"--older-than {text!r} must be more than 0")
    return value


# -- planning -----------------------------------------------------------------

async def _describe_missing(client: Client, run_id: str, store: CheckpointStore, known: list[Execution]) -> list[Execution]:
    """Workflows of the run visibility does not list yet (it lags a moment behind a start):
    the run's own id and those of the branches its checkpoints name."""
    ids = {run_id} | {workflow_id_for(run_id, b) for b in await store.branches(run_id)}
    have = {(e.workflow_id, e.run_id) for e in known}
    found = []
    for wid in sorted(ids):
        try:
            desc = await client.get_workflow_handle(wid).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                continue
            raise
        if (wid, desc.run_id) in have:
            continue
        execution = Execution(wid, desc.run_id, desc.workflow_type, (desc.status.name if desc.status else "unknown").lower(),
                              desc.close_time)
        await read_execution(client, execution)
        if execution.owner == run_id:
            found.append(execution)
    return found


async def _index(client: Client) -> list[Execution]:
    executions = await list_executions(client)
    await read_executions(client, executions)
    return executions


async def _plan(client: Client, store: CheckpointStore, run_ids: list[str], executions: list[Execution]) -> Plan:
    chosen = set(run_ids)
    runs = {r: _RunPlan(r) for r in run_ids}
    others = References()
    for e in executions:
        if e.owner in chosen:
            runs[e.owner].executions.append(e)
        else:
            others.add(e.refs)
    for r, rp in runs.items():
        rp.executions += await _describe_missing(client, r, store, executions)
        rp.checkpoint_keys = await run_object_keys(store, r)
        rp.last_at = await last_checkpoint_at(store, r) if rp.checkpoint_keys else None
        sealed = _refs_of(rp).sealed()
        if sealed:
            raise RewindError(
                f"cannot read all of run {r!r}'s history ({sealed[0]}), so what it keeps in REWIND_PAYLOADS "
                "cannot be told; nothing was deleted. Use the REWIND_ENCRYPTION_KEYS and REWIND_PAYLOADS "
                "its workers had"
            )
    return Plan(runs, others, others.sealed())


async def plan_delete(client: Client, store: CheckpointStore, run_id: str) -> Plan:
    """What deleting `run_id` touches; RunNotFoundError if neither Temporal nor the store has it."""
    validate_id("run", run_id)
    plan = await _plan(client, store, [run_id], await _index(client))
    rp = plan.runs[run_id]
    if not rp.executions and not rp.checkpoint_keys:
        raise RunNotFoundError(
            f"no run {run_id!r} in Temporal (namespace {client.namespace!r}) or in the checkpoint store {store.url}; "
            "check the id (a run that was deleted is unknown afterwards)"
        )
    return plan


async def plan_gc(client: Client, store: CheckpointStore, older_than: timedelta) -> Plan:
    """Every finished run (no branch running or waiting) whose newest checkpoint is older
    than `older_than` (a run without checkpoints: by when its last workflow closed)."""
    executions = await _index(client)
    cutoff = datetime.now(timezone.utc) - older_than
    by_run: dict[str, list[Execution]] = {}
    for e in executions:
        if e.owner is not None:
            by_run.setdefault(e.owner, []).append(e)
    chosen = []
    for run_id in sorted(set(by_run) | set(await store.run_ids())):
        mine = by_run.get(run_id, [])
        if any(e.running for e in mine):
            continue
        last = await last_checkpoint_at(store, run_id)
        if last is None:
            closes = [e.close_time for e in mine if e.close_time is not None]
            last = max(closes) if closes else None
        if last is not None and last < cutoff:
            chosen.append(run_id)
    plan = await _plan(client, store, chosen, executions)
    # A run visibility had not listed as running yet (just started) is not finished: it stays,
    # and so does everything it uses.
    for run_id, rp in list(plan.runs.items()):
        if any(e.running for e in rp.executions):
            del plan.runs[run_id]
            plan.others.add(_refs_of(rp))
    return plan


# -- erasing --------------------------------------------------------------------

def _branch_of(run_id: str, workflow_id: str) -> str:
    return "main" if workflow_id == run_id else workflow_id[len(run_id) + 2:]


def refuse_running(plan: Plan) -> None:
    """RunActiveError naming `--force` if a run of the plan has a branch that still runs."""
    for rp in plan.runs.values():
        running = sorted({_branch_of(rp.run_id, e.workflow_id) for e in rp.executions if e.running})
        if running:
            raise RunActiveError(
                f"run {rp.run_id!r} is still running on branch(es) {', '.join(running)} (running or waiting for "
                f"approval or a budget); stop it first (`rewind cancel {rp.run_id} --branch B`) or pass --force "
                "to terminate it and delete it"
            )


async def _stop(client: Client, rp: _RunPlan) -> list[str]:
    """Terminate the run's running workflows; then read every history again (the run
    may have gone on since it was planned, or continued as new)."""
    stopped = []
    for wid in sorted({e.workflow_id for e in rp.executions if e.running}):
        try:
            await client.get_workflow_handle(wid).terminate(reason=_FORCE_REASON)
            stopped.append(wid)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND and "already completed" not in str(exc):
                raise
    if stopped:
        fresh = []
        for e in rp.executions:
            desc = await client.get_workflow_handle(e.workflow_id, run_id=e.run_id).describe()
            e.status = (desc.status.name if desc.status else "unknown").lower()
            fresh.append(e)
        known = {(e.workflow_id, e.run_id) for e in fresh}
        for wid in stopped:  # a run that continued as new since the plan: its newest execution
            desc = await client.get_workflow_handle(wid).describe()
            if (wid, desc.run_id) not in known:
                fresh.append(Execution(wid, desc.run_id, desc.workflow_type,
                                       (desc.status.name if desc.status else "unknown").lower(), desc.close_time))
        await read_executions(client, fresh)
        rp.executions = [e for e in fresh if e.owner in (rp.run_id, None)]
    return stopped


@dataclass
class _Targets:
    segments: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    local_payloads: set[str] = field(default_factory=set)
    s3_payloads: set[str] = field(default_factory=set)  # bucket/key
    idempotency: set[str] = field(default_factory=set)
    kept: int = 0


async def _computed_segments(requests: list[dict[str, Any]], outputs: OutputStore) -> set[str]:
    """The segments the run's model calls stored, computed from their inputs: a call that
    failed for good (or was stopped) stored its segment but never returned its head."""
    found = set()
    for request in requests:
        try:
            messages = await outputs.resolve_messages(list(request.get("new_messages") or []))
            data = segment_bytes(request.get("transcript_head"), int(request.get("transcript_len") or 0), messages)
        except (RewindError, TypeError, ValueError):
            continue  # an output already gone (an earlier, partial deletion): its segment went before it
        found.add(hashlib.sha256(data).hexdigest())
    return found


async def _targets(rp: _RunPlan, plan: Plan, store: CheckpointStore, outputs: OutputStore) -> _Targets:
    refs = _refs_of(rp)
    shared = plan.others.digests
    t = _Targets()
    segments = refs.segments | await _computed_segments(refs.llm_requests, outputs)
    keys = refs.idempotency | await idempotency_keys_in(store, rp.run_id)
    keys |= {compensation_key(k) for k in keys if k.startswith("idem-")}
    if plan.sealed_others:
        # Another run's history cannot be read here: it may use anything content-addressed.
        t.kept = len(segments) + len(refs.outputs) + len(refs.claims)
        segments, outputs_, claims = set(), set(), set()
    else:
        outputs_, claims = refs.outputs, refs.claims
    t.segments = {d for d in segments if d not in shared}
    t.outputs = {d for d in outputs_ if d not in shared}
    for claim in claims:
        if _shared(claim, plan.others):
            continue
        (t.local_payloads if claim.driver == LOCAL_PAYLOAD_DRIVER else t.s3_payloads).add(claim.key)
    t.kept += (len(segments) - len(t.segments)) + (len(outputs_) - len(t.outputs)) + (
        len(claims) - len(t.local_payloads) - len(t.s3_payloads))
    t.idempotency = {k for k in keys if k not in plan.others.idempotency}
    return t


class _Stores:
    """The stores a deletion writes to, opened once."""

    def __init__(self, settings: Settings, checkpoints: CheckpointStore) -> None:
        from rewind.stores import object_store, payload_store

        self.settings = settings
        self.checkpoints = checkpoints
        self.payloads = payload_store(settings)
        self._object_store = object_store
        self._buckets: dict[str, ObjectStore] = {}

    def bucket(self, name: str) -> ObjectStore:
        # The SDK's S3 driver writes at the bucket's root (v0/...), not under REWIND_PAYLOADS' prefix.
        if name not in self._buckets:
            self._buckets[name] = self._object_store(self.settings, f"s3://{name}")
        return self._buckets[name]

    async def aclose(self) -> None:
        for objects in [self.payloads, *self._buckets.values()]:
            await objects.aclose()


async def _delete_workflow_payloads(stores: _Stores, namespace: str, workflow_ids: list[str]) -> int:
    """Every payload stored for the run's workflows, named in a history or not (the answer to
    a query, a result that never reached history): their keys hold the workflow id, so no other
    run uses them. A folder: temporal/wf/<id>/ (rewind/temporal/payloads.py); S3: the SDK driver's
    v0/ns/<namespace>/wt/<type>/wi/<id>/."""
    where = parse_store_url(stores.settings.payload_url)
    if where.kind != "s3":  # a folder or a database: LocalStorageDriver's keys
        places = [(stores.payloads, workflow_payload_prefix(w)) for w in workflow_ids]
    else:
        bucket = stores.bucket(where.bucket)
        places = [(bucket, f"v0/ns/{namespace}/wt/{kind}/wi/{w}/") for w in workflow_ids
                  for kind in (*REWIND_WORKFLOWS, "null")]
    removed = 0
    for objects, prefix in places:
        keys = await objects.list(prefix)
        if keys:
            await objects.delete_prefix(prefix)
            removed += len(keys)
    return removed


async def _delete_temporal(client: Client, executions: list[Execution], wait_s: float) -> tuple[int, list[Execution]]:
    """Ask Temporal to delete each execution and wait until it is gone from history and
    from visibility; returns (how many were deleted, the ones still there after `wait_s`)."""
    for e in executions:
        try:
            await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(
                namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=e.workflow_id, run_id=e.run_id)))
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
    deadline = time.monotonic() + wait_s
    left = list(executions)
    while left:
        still = []
        for e in left:
            try:
                await client.get_workflow_handle(e.workflow_id, run_id=e.run_id).describe()
                still.append(e)
                continue
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
            listed = [w async for w in client.list_workflows(f"WorkflowId = '{e.workflow_id}' AND RunId = '{e.run_id}'")]
            if listed:
                still.append(e)
        left = still
        if not left or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    return len(executions) - len(left), left


def _same_endpoint(a: str, b: str) -> bool:
    def norm(address: str) -> tuple[str, str]:
        host, _, port = address.rpartition(":")
        return ("127.0.0.1" if host in ("localhost", "127.0.0.1", "") else host, port)

    return norm(a) == norm(b)


def _embedded_database(settings: Settings) -> Path | None:
    """This folder's `rewind server` database, when it is the Temporal the settings point at."""
    from rewind.temporal.dev_server import running_server

    db = (settings.home / "temporal.db").resolve()
    address = running_server(db)
    return db if address is not None and _same_endpoint(address, settings.temporal_address) else None


def _erase_database_files(settings: Settings, report: ErasureReport) -> None:
    from rewind.temporal.dev_server import erase_deleted, zeroes_deleted_rows

    db = _embedded_database(settings)
    if db is None:
        report.notes.append(
            f"Temporal at {settings.temporal_address} is not this folder's `rewind server`: its database erases "
            "deleted rows as it is configured to (docs/checkpoints-and-storage.md: Deleting a run)")
        return
    if zeroes_deleted_rows(db) is False:
        report.notes.append(f"the dev server on {db} was started without secure_delete, so deleted rows may stay "
                            "in its free pages: restart `rewind server` (or run `sqlite3 FILE 'VACUUM'` while it is stopped)")
    if erase_deleted(db):
        report.database = (f"{db}: deleted rows zeroed (secure_delete) and the write-ahead log checkpointed "
                           "and truncated")
    else:
        report.database = f"{db}: the server kept its database busy; the write-ahead log was not truncated"
        report.notes.append("run `rewind delete` again, or stop `rewind server` (it empties its log on exit)")


def _tally(report: ErasureReport) -> str:
    parts = []
    for r in report.runs:
        parts.append(f"{r.run_id}: {r.transcript_segments} segments, {r.tool_outputs} tool outputs, "
                     f"{r.temporal_payloads} Temporal payloads, {r.idempotency_records} idempotency records, "
                     f"{r.checkpoints} checkpoint objects, {r.temporal_executions} Temporal executions")
    return "; ".join(parts) or "nothing"


async def erase(client: Client, settings: Settings, store: CheckpointStore, plan: Plan, *, force: bool = False,
                wait_s: float = DELETE_WAIT_S) -> ErasureReport:
    """Delete every run of `plan` everywhere (see the module docstring). A running branch
    is refused (RunActiveError) unless `force`, which terminates it first."""
    if not force:
        refuse_running(plan)
    report = ErasureReport(runs=[RunErasure(run_id=r, state=_summary(rp).state, last_checkpoint_at=rp.last_at,
                                            workflows=sorted({e.workflow_id for e in rp.executions}))
                                 for r, rp in plan.runs.items()])
    by_id = {r.run_id: r for r in report.runs}
    stores = _Stores(settings, store)
    places = [f"the payload store (REWIND_PAYLOADS {settings.payload_url})", f"the checkpoint store (REWIND_STORE {store.url})",
              f"Temporal ({settings.temporal_address})"]
    phase = "stopping the running workflows (--force)"
    try:
        for rp in plan.runs.values():
            by_id[rp.run_id].stopped = await _stop(client, rp)
        phase = places[0]
        outputs = OutputStore(stores.payloads)
        targets = {r: await _targets(rp, plan, store, outputs) for r, rp in plan.runs.items()}
        # Segments, outputs and records before the Temporal payloads: those may hold the only
        # names of the others (a large model-call input), which a second run needs to read.
        for r, t in targets.items():
            out = by_id[r]
            out.kept_shared = t.kept
            out.transcript_segments = await delete_keys(stores.payloads, map(segment_key, t.segments))
            out.tool_outputs = await delete_keys(stores.payloads, map(output_key, t.outputs))
            out.idempotency_records = await delete_keys(stores.payloads, map(record_key, t.idempotency))
        for r, t in targets.items():
            out = by_id[r]
            out.temporal_payloads = await _delete_workflow_payloads(stores, client.namespace,
                                                                    _workflow_ids(plan.runs[r]))
            out.temporal_payloads += await delete_keys(stores.payloads, t.local_payloads)
            by_bucket: dict[str, list[str]] = {}
            for claim in t.s3_payloads:
                bucket, _, key = claim.partition("/")
                by_bucket.setdefault(bucket, []).append(key)
            for bucket, keys in by_bucket.items():
                out.temporal_payloads += await delete_keys(stores.bucket(bucket), keys)
        phase = places[1]
        for r in plan.runs:
            by_id[r].checkpoints = await delete_run_objects(store, r)
        phase = places[2]
        executions = [e for rp in plan.runs.values() for e in rp.executions]
        _, left = await _delete_temporal(client, executions, wait_s)
        for rp in plan.runs.values():
            mine = {(e.workflow_id, e.run_id) for e in rp.executions}
            by_id[rp.run_id].temporal_executions = len(mine - {(e.workflow_id, e.run_id) for e in left})
        if left:
            raise ErasureIncompleteError(
                f"Temporal still has {len(left)} execution(s) {wait_s:.0f} s after they were deleted "
                f"({', '.join(sorted({e.workflow_id for e in left})[:5])}); Temporal deletes asynchronously")
        # A write may still have been in flight when the run ended (the mirror of its last
        # steps, a call of a workflow --force terminated): once Temporal has let go of the
        # run, its prefix and its records are swept again.
        phase = "the stores, swept once more after Temporal let go of the run"
        places = [phase]
        for r, t in targets.items():
            by_id[r].checkpoints += await delete_run_objects(store, r)
            by_id[r].idempotency_records += await delete_keys(stores.payloads, map(record_key, t.idempotency))
    except (CheckpointError, ErasureIncompleteError, RPCError, PartialDeletion) as exc:
        reason = exc.error if isinstance(exc, PartialDeletion) else exc
        partly = f" ({exc.removed} more object(s) removed in that step)" if isinstance(exc, PartialDeletion) and exc.removed else ""
        left_places = places[places.index(phase):] if phase in places else places
        raise ErasureIncompleteError(
            f"deleting run(s) {', '.join(plan.runs)} stopped at {phase}: {reason}. Removed so far: {_tally(report)}"
            f"{partly}. Left: the run's data in {'; then '.join(left_places)}. Run the same command again to "
            "finish: it reads the run's histories again and skips what is gone"
        ) from exc
    finally:
        await stores.aclose()
    _erase_database_files(settings, report)
    if plan.sealed_others:
        report.notes.append(f"another run's history cannot be read here ({plan.sealed_others[0]}), so content-"
                            "addressed objects were kept; set REWIND_ENCRYPTION_KEYS to every key in use")
    return report


# -- the whole operation ------------------------------------------------------

async def delete_run(client: Client, settings: Settings, store: CheckpointStore, run_id: str, *,
                     force: bool = False) -> ErasureReport:
    """`rewind delete RUN --yes`: plan and erase one run."""
    return await erase(client, settings, store, await plan_delete(client, store, run_id), force=force)


async def gc(client: Client, settings: Settings, store: CheckpointStore, older_than: timedelta | str, *,
             dry_run: bool = False) -> ErasureReport:
    """`rewind gc --older-than D`: erase every finished run older than `older_than`
    (`dry_run`: only say which)."""
    if isinstance(older_than, str):
        older_than = parse_duration(older_than)
    plan = await plan_gc(client, store, older_than)
    if dry_run:
        return plan.report()
    return await erase(client, settings, store, plan)


def report_text(report: ErasureReport) -> str:
    """The report (or the plan) as lines for a person."""
    if not report.runs:
        return "no run to delete"
    verb = "would remove" if report.dry_run else "removed"
    lines = []
    for r in report.runs:
        when = f", last checkpoint {r.last_checkpoint_at.isoformat(timespec='seconds')}" if r.last_checkpoint_at else ""
        lines.append(f"run {r.run_id} ({r.state}{when}):")
        if r.stopped:
            lines.append(f"  stopped      {', '.join(r.stopped)} (--force)")
        lines.append(f"  Temporal     {verb} {r.temporal_executions} execution(s) of {len(r.workflows)} workflow(s)"
                     + (f": {', '.join(r.workflows[:6])}" + (" ..." if len(r.workflows) > 6 else "") if r.workflows else ""))
        lines.append(f"  checkpoints  {verb} {r.checkpoints} object(s) of every branch and revision")
        lines.append(f"  payloads     {verb} {r.transcript_segments} transcript segment(s), {r.tool_outputs} tool "
                     f"output(s), {r.temporal_payloads} Temporal payload(s), {r.idempotency_records} idempotency "
                     "record(s)" + (" (named by its histories only)" if report.dry_run else ""))
        if r.kept_shared:
            lines.append(f"  kept         {r.kept_shared} object(s) other runs use too")
    if report.database:
        lines.append(f"database: {report.database}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
