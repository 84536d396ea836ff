"""The Agent Server API's threads and runs on Rewind's runs (docs/agent-server.md).

A thread is a Rewind run: its id is the run's id. Its first API run starts the graph run
(`rewind start --graph`); a later one continues the thread from its head:

    command={"resume": value}, the thread waiting on interrupt()   -> `rewind approve --value`
                                                                      (the same workflow goes on)
    input (the thread ended, or waits and the input is new)        -> the branch's next revision,
                                                                      the graph invoked again with
                                                                      the input (GraphTurn); nothing
                                                                      of the line before runs again

An API run's stream is the Rewind run's events from where the thread stood when the API run
began (a cursor, or the new revision's start), translated by parts.Translator; `wait` and
`join` read the same stream to its end. What the records keep (records.py): the thread's
owner and metadata, each API run's branch and starting cursor.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

from checkpoint_bridge.events.cursor import Cursor
from rewind.serve.agent.identity import hide, visible
from rewind.serve.agent.parts import Part, Translator, modes_of
from rewind.serve.agent.records import (FINAL, FORGOTTEN, PendingUpdate, RecordConflict, Records, RunRecord, ThreadRecord,
                                        new_id)
from rewind.serve.agent.state import config_of, empty_state, interrupt_list, line_of, thread_state, values_of
from rewind.serve.backends import Backends
from workflows.vocabulary.errors import RunActiveError, RunNotFoundError, UsageError
from workflows.vocabulary.ids import parse_checkpoint_id, validate_id

log = logging.getLogger("rewind.serve")

# How often an enqueued run looks whether the runs before it have ended, and a run's stream
# whether its enqueued run has started.
ENQUEUED_POLL_S = 0.5
# How long `wait` gives the store to catch up with the steps before an interrupt.
SETTLE_S = 30.0
# How long a webhook's server may take to answer.
WEBHOOK_TIMEOUT_S = 10.0


class Agent:
    """The API's threads and runs for one server: its records and its backends."""

    def __init__(self, backends: Backends, hooked: bool) -> None:
        self.backends = backends
        self.hooked = hooked
        self._records: Records | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # enqueued runs and webhooks (asyncio holds tasks weakly)

    @property
    def records(self) -> Records:
        if self._records is None:
            self._records = Records(self.backends.store.objects)
        return self._records

    # -- threads --------------------------------------------------------------------------
    async def thread(self, thread_id: str, identity: str | None) -> ThreadRecord:
        """The thread `identity` may see (404 else)."""
        validate_id("run", thread_id)
        found = await self.records.threads.get(thread_id)
        if found is None and not self.hooked:
            found = await self._adopt(thread_id)
        if found is None or not visible(found.owner, identity, self.hooked):
            raise hide("thread", thread_id)
        return found

    async def _adopt(self, run_id: str) -> ThreadRecord | None:
        """A graph run started otherwise (`rewind start --graph`) read as a thread: its record
        written on first sight. No identity owns it, so with an auth hook nobody sees it here."""
        if f"{FORGOTTEN}{run_id}" in await self.records.objects.list(f"{FORGOTTEN}{run_id}"):
            return None  # a thread deleted through the API stays forgotten
        for document in await line_of(self.backends.store, run_id, "main"):
            details = document.pipeline if isinstance(document.pipeline, dict) else {}
            if details.get("graph"):
                record = ThreadRecord(thread_id=run_id, graph_id=str(details["graph"]), created_at=document.created_at)
                try:
                    return await self.records.threads.put(record, run_id)
                except RecordConflict:  # adopted meanwhile by another request
                    return await self.records.threads.get(run_id)
        return None

    async def create_thread(self, identity: str | None, thread_id: str | None, metadata: dict[str, Any],
                            if_exists: str | None) -> ThreadRecord:
        thread_id = validate_id("run", thread_id) if thread_id else new_id()
        found = await self.records.threads.get(thread_id)
        if found is not None:
            if if_exists == "do_nothing" and visible(found.owner, identity, self.hooked):
                return found
            raise RunActiveError(f"thread {thread_id!r} exists; use if_exists='do_nothing' to get it instead")
        if await self.backends.store.branches(thread_id):
            raise RunActiveError(f"a Rewind run {thread_id!r} exists: read it as a thread (threads.get), or choose "
                                 "another id")
        record = ThreadRecord(thread_id=thread_id, metadata=metadata, owner=identity)
        try:
            return await self.records.threads.put(record, thread_id)
        except RecordConflict:
            raise RunActiveError(f"thread {thread_id!r} was created meanwhile") from None

    async def threads(self, identity: str | None) -> list[ThreadRecord]:
        found = [await self.records.threads.get(i) for i in await self.records.threads.ids()]
        return sorted((t for t in found if t is not None and visible(t.owner, identity, self.hooked)),
                      key=lambda t: t.created_at, reverse=True)

    async def pending(self, thread: ThreadRecord) -> list[dict[str, Any]]:
        """The interrupt()s the thread waits on now."""
        client = await self.backends.client_or_none()
        if client is None or thread.graph_id is None:
            return []
        from rewind.client import run_view

        try:
            view = await run_view(client, thread.thread_id, thread.branch, store=self.backends.store)
        except RunNotFoundError:
            return []
        if view.workflow_status != "running" or view.status is None:
            return []
        return interrupt_list(list(view.status.pending_approvals))

    async def status(self, thread: ThreadRecord) -> str:
        """idle, busy, interrupted or error, as LangGraph says a thread's status."""
        if thread.graph_id is None:
            return "idle"
        runs = await self.records.runs_of(thread.thread_id)
        # A thread with no API run (a graph run the command line started): its branch's own state.
        last = runs[-1] if runs else RunRecord(run_id=thread.thread_id, thread_id=thread.thread_id,
                                                 assistant_id=thread.graph_id, graph_id=thread.graph_id,
                                                 branch=thread.branch)
        state = await self.run_status(last)
        if state in ("pending", "running"):
            return "busy"
        if await self.pending(thread):
            return "interrupted"
        return "error" if state == "error" else "idle"

    async def state(self, thread: ThreadRecord) -> dict[str, Any]:
        """The thread's head as LangGraph's ThreadState."""
        line = await self._line(thread)
        if not line:
            return empty_state(thread.thread_id)
        parent = line[-2] if len(line) > 1 else None
        return thread_state(thread.thread_id, line[-1], parent, None, await self.pending(thread))

    async def state_at(self, thread: ThreadRecord, checkpoint_id: str | None) -> dict[str, Any]:
        """The thread's state at one of its checkpoints (the head without one)."""
        if not checkpoint_id:
            return await self.state(thread)
        document = await self._checkpoint_of(thread, checkpoint_id)
        line = await self._line(thread)
        ids = [d.checkpoint_id for d in line]
        if document.checkpoint_id not in ids:  # a checkpoint of another line of the thread
            return thread_state(thread.thread_id, document, None, None)
        index = ids.index(document.checkpoint_id)
        if index == len(line) - 1:
            return await self.state(thread)
        return thread_state(thread.thread_id, document, line[index - 1] if index else None, line[index + 1])

    async def _settled_state(self, thread: ThreadRecord) -> dict[str, Any]:
        """The head once the store has the steps before the interrupt the thread waits on (a step's
        record can reach the store a moment after the run asks for a person)."""
        deadline = asyncio.get_running_loop().time() + SETTLE_S
        while True:
            waiting = await self.pending(thread)
            due = max((int(i["step"]) - 1 for i in waiting if i.get("step") is not None), default=-1)
            line = await self._line(thread)
            if (line and line[-1].step_index >= due) or asyncio.get_running_loop().time() > deadline:
                return await self.state(thread)
            await asyncio.sleep(0.1)

    async def history(self, thread: ThreadRecord, limit: int) -> list[dict[str, Any]]:
        """The checkpoints of the thread's current line, newest first."""
        line = await self._line(thread)
        waiting = await self.pending(thread)
        out = []
        for index in range(len(line) - 1, -1, -1):
            out.append(thread_state(thread.thread_id, line[index], line[index - 1] if index else None,
                                    line[index + 1] if index + 1 < len(line) else None,
                                    waiting if index == len(line) - 1 else None))
            if len(out) >= limit:
                break
        return out

    async def _line(self, thread: ThreadRecord) -> list[Any]:
        """The thread's line without its `result` step; a fork with no step of its own yet: the line
        up to its fork point."""
        if thread.graph_id is None:
            return []
        line = await line_of(self.backends.store, thread.thread_id, thread.branch)
        if not line and thread.fork_point:
            _run, branch, step = parse_checkpoint_id(thread.fork_point)
            line = [d for d in await line_of(self.backends.store, thread.thread_id, branch) if d.step_index <= step]
        return [d for d in line if d.step_label != "result"]

    async def thread_json(self, thread: ThreadRecord) -> dict[str, Any]:
        state = await self.state(thread)
        return {"thread_id": thread.thread_id, "created_at": thread.created_at.isoformat(),
                "updated_at": thread.updated_at.isoformat(), "metadata": thread.metadata,
                "status": await self.status(thread), "values": state["values"],
                "interrupts": {t["id"]: t["interrupts"] for t in state["tasks"]}, "config": {}, "error": None}

    async def delete_thread(self, thread: ThreadRecord) -> None:
        """The API forgets the thread; its Rewind run stays (`rewind` commands still read it), and is
        not read as a thread again."""
        await self.records.objects.put_if_absent(f"{FORGOTTEN}{thread.thread_id}", b"{}")
        await self.records.runs.delete(thread.thread_id)
        await self.records.threads.delete(thread.thread_id)

    # -- runs -----------------------------------------------------------------------------
    async def run(self, thread: ThreadRecord, run_id: str) -> RunRecord:
        validate_id("run", run_id)
        found = await self.records.runs.get(thread.thread_id, run_id)
        if found is None:
            raise hide("run", run_id)
        return found

    async def run_status(self, run: RunRecord) -> str:
        """An API run's status: its record's once final, else what its branch shows now."""
        if run.status in FINAL or run.branch is None:
            return run.status
        client = await self.backends.client_or_none()
        if client is None:
            return run.status
        from rewind.client import run_view

        try:
            view = await run_view(client, run.thread_id, run.branch, store=self.backends.store)
        except RunNotFoundError:
            return "pending"
        if view.workflow_status == "running":
            waiting = view.status is not None and interrupt_list(list(view.status.pending_approvals))
            return "success" if waiting else "running"
        return {"completed": "success", "failed": "error", "cancelled": "interrupted", "terminated": "interrupted",
                "timed_out": "timeout"}.get(view.workflow_status, "error")

    async def run_json(self, run: RunRecord) -> dict[str, Any]:
        return {"run_id": run.run_id, "thread_id": run.thread_id, "assistant_id": run.assistant_id,
                "created_at": run.created_at.isoformat(), "updated_at": run.updated_at.isoformat(),
                "status": await self.run_status(run), "metadata": run.metadata, "kwargs": run.kwargs,
                "multitask_strategy": run.multitask_strategy}

    async def start(self, thread: ThreadRecord, identity: str | None, body: dict[str, Any]) -> RunRecord:
        """An API run on `thread`: the graph run started, resumed or invoked again (see the module)."""
        graph_id = str(body.get("assistant_id") or "")
        if ":" not in graph_id:
            raise UsageError(f"assistant_id {graph_id!r}: name the graph as MODULE:ATTR (what `rewind start --graph` "
                             "takes; GET /assistants/search lists those run here)")
        if thread.graph_id is not None and graph_id != thread.graph_id:
            raise UsageError(f"thread {thread.thread_id!r} runs graph {thread.graph_id!r}, not {graph_id!r}: a thread "
                             "is one graph's run")
        strategy = body.get("multitask_strategy") or "reject"
        if strategy not in ("reject", "interrupt", "enqueue", "rollback"):
            raise UsageError(f"multitask_strategy {strategy!r}: choose reject, interrupt, enqueue or rollback")
        webhook = body.get("webhook")
        if webhook is not None and not (isinstance(webhook, str) and webhook.startswith(("http://", "https://"))):
            raise UsageError(f"webhook {webhook!r}: give an http:// or https:// URL")
        modes_of(body.get("stream_mode"))  # a 400 before anything starts
        # A Command as RemoteGraph sends it carries its unset fields too (goto=[], update=None).
        command = {k: v for k, v in (body.get("command") or {}).items() if v not in (None, [], {}, ())} or None
        graph_input = body.get("input")
        if command is not None and set(command) - {"resume", "update", "goto"}:
            raise UsageError(f"command {sorted(set(command) - {'resume', 'update', 'goto'})}: a Command has resume, "
                             "update and goto")
        previous = await self.records.runs_of(thread.thread_id)
        busy = bool(previous) and await self.run_status(previous[-1]) in ("pending", "running")
        if busy and (strategy == "reject" or (strategy in ("interrupt", "rollback") and (
                command is not None or thread.update is not None or body.get("checkpoint_id") or body.get("checkpoint")))):
            raise RunActiveError(f"thread {thread.thread_id!r} has run {previous[-1].run_id!r} in progress "
                                 f"(multitask_strategy {strategy!r}"
                                 f"{'' if strategy == 'reject' else ' with a command or a checkpoint'}); wait for it "
                                 "(runs.join), cancel it, or give multitask_strategy 'interrupt' or 'enqueue'")
        record = RunRecord(run_id=new_id(), thread_id=thread.thread_id, assistant_id=graph_id, graph_id=graph_id,
                           metadata=body.get("metadata") or {}, kwargs={k: body.get(k) for k in (
                               "input", "command", "stream_mode", "config", "checkpoint_id", "checkpoint")
                               if body.get(k) is not None},
                           owner=identity, multitask_strategy=strategy, webhook=webhook)
        if busy and strategy == "enqueue":
            # Kept as `pending` (no branch yet) until the runs before it have ended: then it starts (a
            # restarted server goes on waiting for it: resume_background).
            saved = await self.records.runs.put(record, thread.thread_id, record.run_id)
            self.background(self._enqueued(saved))
            return saved
        if busy and strategy == "rollback":
            record = await self._rolled_back(thread, record, graph_input, previous[-1])
        else:
            record = await self._launch(thread, record, graph_input, command, body, busy and strategy == "interrupt",
                                        previous[-1] if previous else None)
        saved = await self.records.runs.put(record, thread.thread_id, record.run_id)
        if saved.webhook:
            self.background(self._notify(saved))
        return saved

    async def _rolled_back(self, thread: ThreadRecord, record: RunRecord, graph_input: Any,
                           before: RunRecord) -> RunRecord:
        """multitask_strategy rollback: the run in progress is stopped and the thread rolled back to
        where it began (`rewind rollback`: its steps stay in the tree as the line's earlier
        revision), then the new input runs from there."""
        from checkpoint_bridge.branches.branching import with_turn
        from rewind.client import rollback

        if before.start_step < 0:
            raise RunActiveError(f"run {before.run_id!r} is the thread's first: there is nothing before it to roll "
                                 "back to; use multitask_strategy 'interrupt', or a new thread")
        result = await rollback(await self.backends.client(), self.backends.settings, self.backends.store,
                                thread.thread_id, before.start_step, branch=thread.branch,
                                then=with_turn(graph_input=graph_input or {}))
        record.branch, record.start_step = result.continued.storage_branch, before.start_step
        await self._finish(before, "interrupted", "rolled back (multitask_strategy rollback)")
        return record

    async def _launch(self, thread: ThreadRecord, record: RunRecord, graph_input: Any, command: dict[str, Any] | None,
                      body: dict[str, Any], busy: bool, before: RunRecord | None) -> RunRecord:
        """Start what `record` runs: the graph run, a fork, a resume or the thread's next invocation."""
        client = await self.backends.client()
        settings = self.backends.settings
        identity, graph_id = record.owner, record.graph_id
        if thread.graph_id is not None:
            line = await self._line(thread)
            record.start_step = line[-1].step_index if line else -1
        if thread.graph_id is None:
            if command is not None:
                raise UsageError(f"thread {thread.thread_id!r} has not run yet: there is no interrupt to resume")
            from rewind.starting import StartRequest, start
            from rewind.stores import check_stores

            await check_stores(settings)
            await start(client, settings, StartRequest(graph=graph_id, input=graph_input or {},
                                                       run_id=thread.thread_id))
            record.branch = "main"

            def first(t: ThreadRecord) -> ThreadRecord:
                return t.model_copy(update={"graph_id": graph_id})

            await self.records.threads.change((thread.thread_id,), first)
        elif thread.update is not None or body.get("checkpoint_id") or (body.get("checkpoint") or {}).get("checkpoint_id"):
            if command is not None:
                raise UsageError("command with a checkpoint (or after update_state) is not built yet: give input, "
                                 "or none to go on from the checkpoint")
            record.branch = await self._fork(thread, body, graph_input)
        else:
            waiting = await self.pending(thread)
            if command is not None and set(command) != {"resume"}:
                # Command(update=..., goto=...): the graph invoked again with it, as the branch's next revision
                # (a thread waiting on an interrupt() is stopped there first: the Command answers it).
                from checkpoint_bridge.branches.branching import with_turn
                from rewind.client import continue_run

                result = await continue_run(client, settings, self.backends.store, thread.thread_id,
                                            with_turn(command=command), branch=thread.branch,
                                            stop="a Command on the thread" if waiting else None)
                record.branch = result.storage_branch
            elif command is not None:
                if not waiting:
                    raise UsageError(f"thread {thread.thread_id!r} waits on no interrupt(); command={{'resume': ...}} "
                                     "answers one")
                record.after = await self._last_cursor(thread.thread_id, thread.branch)
                from rewind.client import approve

                for pending in waiting:
                    await approve(client, thread.thread_id, pending["id"], branch=thread.branch, by=identity or "api",
                                  value=command.get("resume"))
                record.branch = thread.branch
            else:
                from checkpoint_bridge.branches.branching import with_turn
                from rewind.client import continue_run

                stop = ("multitask_strategy interrupt: a new run on the thread" if busy else
                        "a new input on the thread" if waiting else None)
                result = await continue_run(client, settings, self.backends.store, thread.thread_id,
                                            with_turn(graph_input=graph_input or {}), branch=thread.branch, stop=stop)
                record.branch = result.storage_branch
                if busy and before is not None:
                    await self._finish(before, "interrupted", None)
        return record

    # -- in the background: enqueued runs, webhooks -----------------------------------------
    def background(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def resume_background(self) -> None:
        """After a restart: the enqueued runs still to start, the webhooks still to call."""
        try:
            await self._resume_background()
        except Exception as exc:  # noqa: BLE001 - the store unreachable at start: said, the server serves on
            log.warning("enqueued runs and webhooks not resumed at start: %s", exc)

    async def _resume_background(self) -> None:
        for thread_id in await self.records.threads.ids():
            for run in await self.records.runs_of(thread_id):
                if run.status == "pending" and run.branch is None and run.multitask_strategy == "enqueue":
                    self.background(self._enqueued(run))
                elif run.webhook and not run.webhook_sent:
                    self.background(self._notify(run))

    async def _enqueued(self, run: RunRecord) -> None:
        try:
            while True:
                earlier = [r for r in await self.records.runs_of(run.thread_id) if r.created_at < run.created_at]
                if not [r for r in earlier if await self.run_status(r) in ("pending", "running")]:
                    break
                await asyncio.sleep(ENQUEUED_POLL_S)
            thread = await self.records.threads.get(run.thread_id)
            if thread is None:
                return
            body = dict(run.kwargs)
            command = {k: v for k, v in (body.get("command") or {}).items() if v not in (None, [], {}, ())} or None
            launched = await self._launch(thread, run, body.get("input"), command, body, False, None)

            def started(r: RunRecord) -> RunRecord:
                return r.model_copy(update={"branch": launched.branch, "after": launched.after})

            run = await self.records.runs.change((run.thread_id, run.run_id), started)
        except Exception as exc:  # noqa: BLE001 - the run's record says why it never started
            log.warning("enqueued run %s of thread %s did not start: %s", run.run_id, run.thread_id, exc)
            await self._finish(run, "error", f"it did not start: {exc}")
            return
        if run.webhook:
            await self._notify(run)

    async def _notify(self, run: RunRecord) -> None:
        """POST the run, as runs.get answers it, to its webhook once it has ended."""
        import aiohttp  # a core dependency (httpx is not)

        try:
            async for _part in self.parts(run, ["values"], False):
                pass
            fresh = await self.records.runs.get(run.thread_id, run.run_id) or run
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S)) as http:
                async with http.post(str(run.webhook), json=await self.run_json(fresh)) as answer:
                    log.info("webhook of run %s: %s %d", run.run_id, run.webhook, answer.status)
        except Exception as exc:  # noqa: BLE001 - said once on the log; the run is not changed by it
            log.warning("webhook of run %s (%s) failed: %s", run.run_id, run.webhook, exc)

        def sent(r: RunRecord) -> RunRecord:
            return r.model_copy(update={"webhook_sent": True})

        await self.records.runs.change((run.thread_id, run.run_id), sent)

    async def update_state(self, thread: ThreadRecord, values: dict[str, Any], as_node: str | None,
                           checkpoint_id: str | None) -> dict[str, Any]:
        """`update_state`: kept until the thread's next run, which forks at the checkpoint (the head
        unless told) with `values` set (`rewind fork --set`); the line it had stays as it was."""
        if thread.graph_id is None:
            raise UsageError(f"thread {thread.thread_id!r} has not run yet: run it first, then update its state")
        runs = await self.records.runs_of(thread.thread_id)
        if runs and await self.run_status(runs[-1]) in ("pending", "running"):
            raise RunActiveError(f"thread {thread.thread_id!r} has a run in progress; wait for it or cancel it first")
        checkpoint_id = checkpoint_id or (await self.state(thread))["checkpoint"]["checkpoint_id"]
        document = await self._checkpoint_of(thread, checkpoint_id)
        pending = PendingUpdate(checkpoint_id=document.checkpoint_id, branch=document.branch_id,
                                step=document.step_index, values=dict(values or {}), as_node=as_node)

        def keep(t: ThreadRecord) -> ThreadRecord:
            return t.model_copy(update={"update": pending})

        await self.records.threads.change((thread.thread_id,), keep)
        return {"checkpoint": config_of(thread.thread_id, document.checkpoint_id)}

    async def _checkpoint_of(self, thread: ThreadRecord, checkpoint_id: str) -> Any:
        run_id, _branch, _step = parse_checkpoint_id(checkpoint_id)
        if run_id != thread.thread_id:
            raise UsageError(f"checkpoint {checkpoint_id!r} is not one of thread {thread.thread_id!r}")
        return await self.backends.store.load(checkpoint_id)

    async def _fork(self, thread: ThreadRecord, body: dict[str, Any], graph_input: Any) -> str:
        """A run from a checkpoint (after update_state, or with checkpoint_id): a Rewind fork named
        `thread-fork-N`, which becomes the thread's line."""
        from checkpoint_bridge.branches.branching import turns_until, with_turn
        from rewind.client import fork

        update = thread.update
        asked = body.get("checkpoint_id") or (body.get("checkpoint") or {}).get("checkpoint_id")
        if asked:
            document = await self._checkpoint_of(thread, asked)
            branch, step, values = document.branch_id, document.step_index, dict(update.values) if update else {}
        else:
            assert update is not None
            branch, step, values = update.branch, update.step, dict(update.values)
        name = f"thread-fork-{thread.forks + 1}"
        result = await fork(await self.backends.client(), self.backends.settings, self.backends.store,
                            thread.thread_id, step, branch=name, from_branch=branch, variables=values or {},
                            then=with_turn(graph_input=graph_input) if graph_input else turns_until)

        def moved(t: ThreadRecord) -> ThreadRecord:
            return t.model_copy(update={"branch": name, "forks": t.forks + 1, "update": None,
                                        "fork_point": result.fork_point})

        await self.records.threads.change((thread.thread_id,), moved)
        return result.storage_branch

    async def _last_cursor(self, thread_id: str, branch: str) -> str | None:
        """The cursor after the thread's last durable event now: a resumed run's stream starts there."""
        from rewind.watching import events

        last = None
        source = events(thread_id, branch, None, settings=self.backends.settings,
                        client=await self.backends.client(), follow=False)
        async for event in source:
            if event.cursor:
                last = event.cursor
        return last

    async def parts(self, run: RunRecord, stream_mode: Any, subgraphs: bool,
                    after: str | None = None) -> AsyncIterator[Part]:
        """The run's stream parts from its start (or after `after`, a Last-Event-ID) to its end."""
        from rewind.watching import events

        modes = modes_of(stream_mode)
        if after is not None:
            Cursor.parse(after)
        while run.branch is None and run.status not in FINAL:  # an enqueued run, not started yet
            await asyncio.sleep(ENQUEUED_POLL_S)
            run = await self.records.runs.get(run.thread_id, run.run_id) or run
        if run.branch is None:
            return
        store = self.backends.store

        async def values_at(checkpoint_id: str) -> dict[str, Any]:
            return values_of(await store.load(checkpoint_id))

        translator = Translator(run.run_id, run.thread_id, modes, subgraphs, values_at)
        if after is None:
            for part in translator.opening():
                yield part
        source = events(run.thread_id, run.branch, after or run.after, settings=self.backends.settings,
                        client=await self.backends.client())
        try:
            async for event in source:
                for part in await translator.parts(event):
                    yield part
                if translator.ended:
                    break
        finally:
            await source.aclose()  # type: ignore[attr-defined]
        if translator.ended:
            await self._finish(run, translator.ended, translator.error)

    async def _finish(self, run: RunRecord, status: str, error: str | None) -> None:
        def edit(r: RunRecord) -> RunRecord | None:
            if r.status in FINAL:
                return None
            return r.model_copy(update={"status": status, "error": error})

        await self.records.runs.change((run.thread_id, run.run_id), edit)

    async def wait(self, thread: ThreadRecord, run: RunRecord) -> dict[str, Any]:
        """The run read to its end; the thread's values then (with `__interrupt__` when it waits)."""
        async for _part in self.parts(run, ["values"], False):
            pass
        thread = await self.records.threads.get(thread.thread_id) or thread
        state = await self._settled_state(thread)
        values = dict(state["values"])
        if state["interrupts"]:
            values["__interrupt__"] = state["interrupts"]
        return values

    async def cancel(self, run: RunRecord) -> None:
        """Cancel the run's workflow (its checkpoints are kept; `rewind cancel`)."""
        if await self.run_status(run) not in ("pending", "running") or run.branch is None:
            return
        from checkpoint_bridge.temporal.runs import branch_workflows

        workflows = await branch_workflows(await self.backends.client(), run.thread_id, run.branch)
        if workflows:
            await workflows[-1][1].cancel()


__all__ = ["Agent"]
