"""What Temporal histories name in the payload store, and which run each belongs to.

The payload store is content-addressed and shared by every run: a transcript
segment, a tool output or a large Temporal payload is named by the sha256 of
its bytes, so two runs that produce the same bytes (the same system prompt and
task, the same tool output) share one object. Nothing in the store says who
uses an object; the histories do. Every object a run uses is named in its own
history: each segment is the head a model call returned (or the seed head of a
fork's or rollback's input, written as one root segment), each output by
reference is named by the tool call that stored it, each payload kept outside
history by the reference history holds instead, each idempotency record by the
key of its call. So reading a history tells both what a run uses and, read for
every other run, what must stay.

Payloads are read the way the workers wrote them: decrypted with the client's
codec (REWIND_ENCRYPTION_KEYS) and, for a reference, fetched from the payload
store through the same storage driver; then the JSON is searched.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import ExternalStorageReference
from temporalio.client import Client
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext

from checkpoint_bridge.checkpoints.erasure import IDEMPOTENCY_KEY
from rewind.temporal.encryption import ENCODING as ENCRYPTED
from rewind.temporal.payloads import local_payload_key
from workflows.vocabulary.errors import PayloadIntegrityError
from workflows.vocabulary.tool_calls import OUTPUT_REF
from workflows.vocabulary.wire import (
    AGENT_WORKFLOW,
    PIPELINE_WORKFLOW,
    CALL_LLM,
    COMPENSATION_WORKFLOW,
    EXPERIMENT_WORKFLOW,
    LOCAL_PAYLOAD_DRIVER,
    S3_PAYLOAD_DRIVER,
    SCORE_WORKFLOW,
)

__all__ = ["Claim", "References", "Execution", "REWIND_WORKFLOWS", "list_executions", "read_execution", "read_executions"]

# Every workflow type Rewind starts (each names its run in its input's `run_id`, if it has one).
REWIND_WORKFLOWS = (AGENT_WORKFLOW, COMPENSATION_WORKFLOW, EXPERIMENT_WORKFLOW, SCORE_WORKFLOW, PIPELINE_WORKFLOW)

# Any sha256-looking string: what another run may share (a superset, so more stays, never less).
_DIGEST = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# The fields that name objects of the run itself (contracts.py: LlmRequest/LlmResponse/LoopState,
# ToolOutcome/ToolCallLog, and a tool message's reference).
_SEGMENT_REF = re.compile(rb'"transcript_head"\s*:\s*"([0-9a-f]{64})"')
_OUTPUT_REF = re.compile(rb'"(?:output_ref|' + re.escape(OUTPUT_REF.encode()) + rb')"\s*:\s*"([0-9a-f]{64})"')
_REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
_LEGACY_REFERENCE = b"json/external-storage-reference"
_PAYLOAD = Payload.DESCRIPTOR.full_name


@dataclass(frozen=True)
class Claim:
    """A payload kept outside history: `driver`, where it is (local: its key in the payload
    store; S3: `bucket/key`), its sha256, and whether its key is the workflow's own (under the
    workflow id, so no other run can name it) or shared by digest."""

    driver: str
    key: str
    digest: str
    scoped: bool


@dataclass
class References:
    segments: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)
    idempotency: set[str] = field(default_factory=set)
    claims: set[Claim] = field(default_factory=set)
    # The inputs of the run's model calls: a call that never returned still stored its segment.
    llm_requests: list[dict[str, Any]] = field(default_factory=list)
    # Payloads that could not be read: "sealed" (encrypted with a key this client
    # lacks, an unknown storage driver) or "missing" (gone from the payload store).
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    def sealed(self) -> list[str]:
        return [why for kind, why in self.unreadable if kind == "sealed"]

    def add(self, other: References) -> None:
        self.segments |= other.segments
        self.outputs |= other.outputs
        self.digests |= other.digests
        self.idempotency |= other.idempotency
        self.claims |= other.claims
        self.llm_requests += other.llm_requests
        self.unreadable += other.unreadable


@dataclass
class Execution:
    """One workflow run in Temporal (a branch's workflow, one of its continued-as-new runs,
    a compensation), and what its history names once read."""

    workflow_id: str
    run_id: str
    workflow_type: str
    status: str  # running, completed, failed, canceled, terminated, continued_as_new, timed_out
    close_time: datetime | None = None
    owner: str | None = None  # the Rewind run it belongs to, from its input
    refs: References = field(default_factory=References)

    @property
    def running(self) -> bool:
        return self.status == "running"


def _status(value: Any) -> str:
    name = getattr(value, "name", None) or "unknown"
    return name.lower()


async def list_executions(client: Client) -> list[Execution]:
    """Every execution of Rewind's workflow types that visibility lists (open and closed)."""
    query = " OR ".join(f"WorkflowType = '{t}'" for t in REWIND_WORKFLOWS)
    found = []
    async for wf in client.list_workflows(query, page_size=1000):
        found.append(Execution(wf.id, wf.run_id, wf.workflow_type, _status(wf.status), wf.close_time))
    return found


def _payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload anywhere in `message` (inputs, results, failures' details, memo,
    heartbeats, search attributes ...), whatever the event type."""
    for fd, value in message.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].type != FieldDescriptor.TYPE_MESSAGE:
                continue
            items: Any = value.values()
        elif fd.is_repeated:
            items = value
        else:
            items = (value,)
        for item in items:
            if item.DESCRIPTOR.full_name == _PAYLOAD:
                yield item
            else:
                yield from _payloads_in(item)


def _reference(payload: Payload) -> ExternalStorageReference | None:
    encoding = payload.metadata.get("encoding", b"")
    try:
        if encoding == b"json/protobuf" and payload.metadata.get("messageType") == _REFERENCE_TYPE:
            return json_format.Parse(payload.data, ExternalStorageReference(), ignore_unknown_fields=True)
        if encoding == _LEGACY_REFERENCE:
            doc = json.loads(payload.data)
            return ExternalStorageReference(driver_name=doc["driver_name"], claim_data=doc["driver_claim"]["claim_data"])
    except (ValueError, KeyError, TypeError, json_format.ParseError):
        return None
    return None


def _claim(ref: ExternalStorageReference) -> Claim | None:
    data = dict(ref.claim_data)
    try:
        if ref.driver_name == LOCAL_PAYLOAD_DRIVER and "sha256" in data:
            workflow_id = data.get("workflow_id")
            return Claim(LOCAL_PAYLOAD_DRIVER, local_payload_key(data["sha256"], workflow_id), data["sha256"],
                         workflow_id is not None)
    except PayloadIntegrityError:
        return None
    if ref.driver_name == S3_PAYLOAD_DRIVER and "bucket" in data and "key" in data:
        # The SDK's S3 keys: v0/ns/<ns>/wt/<type>/wi/<workflow id>/... for a workflow's payloads.
        return Claim(S3_PAYLOAD_DRIVER, f"{data['bucket']}/{data['key']}", data.get("hash_value", ""),
                     "/wi/" in data["key"])
    return None


class _Reader:
    def __init__(self, client: Client) -> None:
        converter = client.data_converter
        self._codec = converter.payload_codec
        storage = converter.external_storage
        self._drivers = {d.name(): d for d in storage.drivers} if storage is not None else {}

    async def open(self, payload: Payload, refs: References) -> bytes | None:
        """The payload's own bytes (decrypted, fetched if kept outside); None if unreadable."""
        for _ in range(4):  # encrypted, then a reference, then encrypted again at most
            if payload.metadata.get("encoding") == ENCRYPTED:
                if self._codec is None:
                    refs.unreadable.append(("sealed", "an encrypted payload and no REWIND_ENCRYPTION_KEYS"))
                    return None
                try:
                    payload = (await self._codec.decode([payload]))[0]
                except Exception as exc:  # noqa: BLE001 - a key this client lacks
                    refs.unreadable.append(("sealed", f"a payload that does not decrypt ({exc})"[:300]))
                    return None
                continue
            ref = _reference(payload)
            if ref is None:
                return payload.data
            claim = _claim(ref)
            if claim is not None:
                refs.claims.add(claim)
            driver = self._drivers.get(ref.driver_name)
            if driver is None:
                refs.unreadable.append(("sealed", f"a payload kept by storage driver {ref.driver_name!r}, which this client lacks"))
                return None
            try:
                payload = (await driver.retrieve(StorageDriverRetrieveContext(),
                                                 [StorageDriverClaim(claim_data=dict(ref.claim_data))]))[0]
            except Exception as exc:  # noqa: BLE001 - gone from the store (an earlier, partial deletion) or down
                refs.unreadable.append(("missing", f"a payload kept outside history could not be read ({exc})"[:300]))
                return None
        return payload.data

    def scan(self, data: bytes, refs: References) -> None:
        refs.digests.update(m.decode() for m in _DIGEST.findall(data))
        refs.segments.update(m.decode() for m in _SEGMENT_REF.findall(data))
        refs.outputs.update(m.decode() for m in _OUTPUT_REF.findall(data))
        refs.idempotency.update(m.decode() for m in IDEMPOTENCY_KEY.findall(data))


def _owner(first_input: bytes | None) -> str | None:
    """The run an execution belongs to: `run_id` of its AgentInput, or of its CompensationRequests."""
    if not first_input:
        return None
    try:
        doc = json.loads(first_input)
    except ValueError:
        return None
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        doc = doc[0]
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    return run_id if isinstance(run_id, str) else None


async def read_execution(client: Client, execution: Execution) -> None:
    """Read the execution's whole history: its owner and everything it names (into `execution`)."""
    reader = _Reader(client)
    refs = References()
    handle = client.get_workflow_handle(execution.workflow_id, run_id=execution.run_id)
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes.input.payloads
            first = await reader.open(started[0], refs) if started else None
            execution.owner = _owner(first)
        llm_input = (event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                     and event.activity_task_scheduled_event_attributes.activity_type.name == CALL_LLM)
        for payload in _payloads_in(event):
            data = await reader.open(payload, refs)
            if data is None:
                continue
            reader.scan(data, refs)
            if llm_input:
                try:
                    request = json.loads(data)
                except ValueError:
                    continue
                if isinstance(request, dict) and "new_messages" in request:
                    refs.llm_requests.append(request)
    execution.refs = refs


async def read_executions(client: Client, executions: list[Execution], *, concurrency: int = 8) -> None:
    """`read_execution` for each, a few at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(execution: Execution) -> None:
        async with gate:
            await read_execution(client, execution)

    await asyncio.gather(*(one(e) for e in executions))
