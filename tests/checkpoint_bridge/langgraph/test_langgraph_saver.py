"""RewindSaver's own promises, beyond LangGraph's conformance suite: linear storage,
clear errors for what cannot be stored, damage found on read, names that are
safe as keys, a layout an importer can walk, and deletions that erase."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph_agent import build_graph, first_input, summary
from store_backends import Backend
from typing_extensions import TypedDict

from checkpoint_bridge.langgraph.layout import decode_name, encode_name
from checkpoint_bridge.langgraph.objects import VALUE_FORMAT, decode_object, encode_object
from checkpoint_bridge.langgraph.saver import AsyncRewindSaver, RewindSaver, list_thread
from checkpoint_bridge.stores.contract import check_key
from rewind.worker.scripted_model import ScriptedModelServer
from workflows.vocabulary.errors import (
    CheckpointExistsError,
    ConfigError,
    CorruptCheckpointError,
    InvalidIdError,
    UnstorableStateError,
    UsageError,
)


def _long_script(model: ScriptedModelServer, turns: int, size: int = 2048) -> str:
    name = f"long-{uuid.uuid4().hex[:6]}"
    model.add_script(name, [{"tool_calls": [{"name": "lookup", "arguments": {"key": f"k{i}", "size": size}}]}
                            for i in range(turns - 1)] + [{"content": "done"}])
    return name


def _run(saver: Any, model: ScriptedModelServer, script: str, thread: str, **config: Any) -> dict[str, Any]:
    graph = build_graph(model.base_url, f"script:{script}").compile(checkpointer=saver)
    return graph.invoke(first_input(), {"configurable": {"thread_id": thread}, "recursion_limit": 500, **config})


def _items(*numbers: int) -> list[str]:
    """List elements large enough that the list gets value objects (small values stay in the record)."""
    return [f"item {n}: " + "x" * 120 for n in numbers]


def _put(saver: RewindSaver, thread: str, values: dict[str, Any], parent: dict | None = None, **meta: Any) -> dict:
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions = {k: (parent or {}).get("v", 0) + 1 for k in values}
    cp = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(config, cp, generate_metadata(**meta), versions)


# ---------------------------------------------------------------------- storage


def test_a_long_conversation_stores_each_message_once(backend: Backend, model: ScriptedModelServer) -> None:
    script = _long_script(model, 40)
    objects = backend.objects()
    with RewindSaver(objects) as saver:
        final = _run(saver, model, script, "long")
        assert len(final["messages"]) == 1 + 39 * 2 + 1
        keys = saver._run(objects.list(saver.layout.thread("long")))
        blobs = {k: saver._run(objects.get(k)) for k in keys}
    serde = JsonPlusSerializer()
    content = sum(len(serde.dumps_typed(m)[1]) for m in final["messages"])
    lists = {k: b for k, b in blobs.items() if k.endswith("/messages.bin")}
    modes = sorted(decode_object(b, k, VALUE_FORMAT).header["mode"] for k, b in lists.items())
    # The first checkpoint's one message sits in its record; then one whole list, and one delta per
    # checkpoint that added messages.
    assert modes == ["delta"] * (len(lists) - 1) + ["list"], modes
    assert len(lists) == 79
    # Each 2 KB tool message is one element object, though a task wrote it and a checkpoint appended it.
    elements = [k for k in blobs if "/elements/" in k]
    assert len(elements) == 39
    # Everything the thread stored (records, writes, deltas, elements) stays close to the content;
    # rewriting the conversation at every checkpoint would store it ~40 times.
    stored = sum(map(len, blobs.values()))
    assert stored < 3 * content, (stored, content)
    # And no step costs more than the first ones did.
    sizes = [len(b) for _k, b in sorted(lists.items())]
    assert max(sizes[-10:]) < 1.5 * max(sizes[1:11]), sizes
    # Another process (cold caches) rebuilds the 80-link chain to the same conversation.
    with RewindSaver(backend.reopen(objects)) as cold:
        state = cold.get_tuple({"configurable": {"thread_id": "long"}})
        assert summary(state.checkpoint["channel_values"]["messages"]) == summary(final["messages"])


def test_a_list_that_does_not_extend_its_parent_is_stored_whole(backend: Backend) -> None:
    with RewindSaver(backend.objects()) as saver:
        first = _put(saver, "t", {"items": _items(1, 2, 3)})
        grown = _put(saver, "t", {"items": _items(1, 2, 3, 4)}, parent={**first, "v": 1})
        changed = _put(saver, "t", {"items": _items(9, 2, 3, 4)}, parent={**grown, "v": 2})
        heads = []
        for cfg in (first, grown, changed):
            cid = cfg["configurable"]["checkpoint_id"]
            key = saver.layout.value("t", "", cid, "items")
            heads.append(decode_object(saver._run(saver.objects.get(key)), key, VALUE_FORMAT).header["mode"])
        assert heads == ["list", "delta", "list"]
        assert [saver.get_tuple(c).checkpoint["channel_values"]["items"] for c in (first, grown, changed)] == \
            [_items(1, 2, 3), _items(1, 2, 3, 4), _items(9, 2, 3, 4)]


# ---------------------------------------------------------------------- what cannot be stored


class Opaque:
    """Not data: no dataclass, no pydantic model, nothing msgpack knows."""


def test_a_value_that_is_not_data_is_a_clear_error_and_nothing_is_stored(backend: Backend) -> None:
    with RewindSaver(backend.objects()) as saver:
        with pytest.raises(UnstorableStateError, match=r"channel 'thing' .* holds a Opaque .*pickle off"):
            _put(saver, "t", {"fine": "yes", "thing": Opaque()})
        with pytest.raises(UnstorableStateError, match=r"element 1 of channel 'items'"):
            _put(saver, "t", {"items": ["ok", Opaque()]})
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
        config = _put(saver, "t", {"fine": "yes"})
        with pytest.raises(UnstorableStateError, match=r"write to channel 'ch' by task task-1"):
            saver.put_writes(config, [("ch", lambda: 1)], "task-1")
        assert saver.get_tuple(config).pending_writes == []


class _State(TypedDict):
    thing: Any


def test_a_graph_whose_state_is_not_data_fails_with_the_saver_s_error(backend: Backend) -> None:
    builder = StateGraph(_State)
    builder.add_node("make", lambda state: {"thing": Opaque()})
    builder.add_edge(START, "make")
    with RewindSaver(backend.objects()) as saver:
        graph = builder.compile(checkpointer=saver)
        with pytest.raises(UnstorableStateError, match="Opaque"):
            graph.invoke({"thing": 1}, {"configurable": {"thread_id": "g"}}, durability="sync")


def test_pickle_is_refused(backend: Backend) -> None:
    with pytest.raises(ConfigError, match="without pickle fallback"):
        RewindSaver(backend.objects(), serde=JsonPlusSerializer(pickle_fallback=True))
    with pytest.raises(ConfigError, match="without pickle fallback"):
        AsyncRewindSaver(backend.objects(), serde=JsonPlusSerializer(pickle_fallback=True))

    class Pickling(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return "pickle", b"\x80\x04N."

    with RewindSaver(backend.objects(), serde=Pickling()) as saver:
        with pytest.raises(UnstorableStateError, match="only store as a pickle"):
            _put(saver, "t", {"x": 1})


# ---------------------------------------------------------------------- damage


def test_a_changed_record_or_value_is_found_on_read(backend: Backend) -> None:
    objects = backend.objects()
    with RewindSaver(objects) as saver:
        first = _put(saver, "t", {"items": _items(1, 2)})
        second = _put(saver, "t", {"items": _items(1, 2, 3)}, parent={**first, "v": 1})
        record = saver.layout.record("t", "", second["configurable"]["checkpoint_id"])
        good = saver._run(objects.get(record))
        base_key = saver.layout.value("t", "", first["configurable"]["checkpoint_id"], "items")
    backend.tamper(objects, record, good.replace(b'"step":0', b'"step":7'))
    with RewindSaver(backend.reopen(objects)) as cold:
        with pytest.raises(CorruptCheckpointError, match=f"{record}.*does not match its sha256"):
            cold.get_tuple(second)
    backend.tamper(objects, record, good)
    # A base replaced by another well-formed list: the delta's link check finds it.
    serde = JsonPlusSerializer()
    backend.tamper(objects, base_key, encode_object(VALUE_FORMAT, {"mode": "list"},
                                                    [serde.dumps_typed(v) for v in _items(5, 6)]))
    with RewindSaver(backend.reopen(objects)) as cold:
        with pytest.raises(CorruptCheckpointError, match="the base was replaced"):
            cold.get_tuple(second)
        cold._run(cold.objects.delete(base_key))
    with RewindSaver(backend.reopen(objects)) as cold:
        with pytest.raises(CorruptCheckpointError, match=f"{base_key} is missing"):
            cold.get_tuple(second)


def test_a_checkpoint_id_is_never_stored_twice_with_other_content(backend: Backend) -> None:
    with RewindSaver(backend.objects()) as saver:
        cp = generate_checkpoint(channel_values={"x": 1}, channel_versions={"x": 1})
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, cp, generate_metadata(step=1), {"x": 1})
        saver.put(config, cp, generate_metadata(step=1), {"x": 1})  # the same again: a no-op
        with pytest.raises(CheckpointExistsError, match="immutable"):
            saver.put(config, cp, generate_metadata(step=2), {"x": 1})
        assert saver.get_tuple(config).metadata["step"] == 1


# ---------------------------------------------------------------------- inputs and names


def test_bad_calls_are_clear_errors(backend: Backend) -> None:
    with RewindSaver(backend.objects()) as saver:
        cp = generate_checkpoint()
        with pytest.raises(UsageError, match="names no thread"):
            saver.put({"configurable": {}}, cp, generate_metadata(), {})
        with pytest.raises(UsageError, match="needs a config"):
            saver.get_tuple({})
        with pytest.raises(UsageError, match="names no checkpoint_id"):
            saver.put_writes({"configurable": {"thread_id": "t"}}, [("ch", 1)], "task")
        with pytest.raises(UsageError, match="unknown strategy 'oldest'"):
            saver.prune(["t"], strategy="oldest")
        with pytest.raises(InvalidIdError, match="too long"):
            saver.get_tuple({"configurable": {"thread_id": "x" * 300}})
        with pytest.raises(UsageError, match="prefix"):
            RewindSaver(backend.objects(), prefix="../up")


@pytest.mark.parametrize("name", ["../../etc", "a/b", "..", "_x", "-x", "thread:1|child:2", "naïve ☃", "x.y", "root"])
def test_names_round_trip_and_stay_inside_the_store(name: str) -> None:
    segment = encode_name("thread_id", name)
    check_key(segment)
    assert decode_name(segment) == name


def test_odd_threads_namespaces_and_channels_round_trip(backend: Backend) -> None:
    objects = backend.objects()
    before = set(backend.all_keys())
    with RewindSaver(objects) as saver:
        for thread in ["../../escape", "a/b", "root", "ünï"]:
            for ns in ["", "root", "outer:1|inner:2"]:
                config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
                cp = generate_checkpoint(channel_values={"__start__": {"q": thread}, "branch:to:x": None},
                                         channel_versions={"__start__": 1, "branch:to:x": 1})
                stored = saver.put(config, cp, generate_metadata(), {"__start__": 1, "branch:to:x": 1})
                saver.put_writes(stored, [("__interrupt__", {"ns": ns})], "task/../1")
                got = saver.get_tuple(config)
                assert got.config["configurable"] == stored["configurable"]
                assert got.checkpoint["channel_values"] == {"__start__": {"q": thread}, "branch:to:x": None}
                assert got.pending_writes == [("task/../1", "__interrupt__", {"ns": ns})]
            assert {t.config["configurable"]["checkpoint_ns"] for t in saver.list({"configurable": {"thread_id": thread}})} \
                == {"", "root", "outer:1|inner:2"}
    new = set(backend.all_keys()) - before
    # Per thread and namespace: a record (holding the small values) and a write object.
    assert len(new) == 4 * 3 * 2 and all(check_key(k) for k in new)
    if backend.name == "file":
        assert all(k.startswith(objects.root.name + "/langgraph/threads/") for k in new), sorted(new)[:3]


def test_an_importer_lists_a_thread_in_order_with_parent_links(backend: Backend, model: ScriptedModelServer) -> None:
    script = _long_script(model, 4)
    objects = backend.objects()
    with RewindSaver(objects) as saver:
        _run(saver, model, script, "walk")
        expected = [(t.checkpoint["id"], t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None,
                     t.metadata["step"], t.metadata["source"]) for t in reversed(list(saver.list({"configurable": {"thread_id": "walk"}})))]
        stored = saver._run(list_thread(objects, "walk"))
    assert [(r.checkpoint_id, r.parent_checkpoint_id, r.step, r.source) for r in stored] == expected
    assert [r.step for r in stored] == list(range(-1, len(stored) - 1))
    assert stored[0].parent_checkpoint_id is None
    assert all(b.parent_checkpoint_id == a.checkpoint_id for a, b in zip(stored, stored[1:]))


# ---------------------------------------------------------------------- deletion


def _thread_keys(backend: Backend, saver: RewindSaver, thread: str) -> list[str]:
    return saver._run(saver.objects.list(saver.layout.thread(thread)))


def test_prune_keep_latest_erases_the_rest_and_keeps_what_the_latest_builds_on(
    backend: Backend, model: ScriptedModelServer,
) -> None:
    script = _long_script(model, 6)
    objects = backend.objects()
    with RewindSaver(objects) as saver:
        final = _run(saver, model, script, "p")
        before = _thread_keys(backend, saver, "p")
        saver.prune(["p"])
        after = _thread_keys(backend, saver, "p")
    records = [k for k in after if "/checkpoints/" in k]
    assert len(records) == 1 and not [k for k in after if "/writes/" in k]
    assert len(after) < len(before) / 2, (len(after), len(before))
    with RewindSaver(backend.reopen(objects)) as cold:
        tuples = list(cold.list({"configurable": {"thread_id": "p"}}))
        assert len(tuples) == 1 and tuples[0].parent_config is not None  # its parent is gone, the link stays
        assert summary(tuples[0].checkpoint["channel_values"]["messages"]) == summary(final["messages"])


def test_delete_for_runs_erases_one_run_and_the_next_run_still_loads(backend: Backend, model: ScriptedModelServer) -> None:
    objects = backend.objects()
    run1, run2 = str(uuid.uuid4()), str(uuid.uuid4())
    first, second = _long_script(model, 3), _long_script(model, 2)
    with RewindSaver(objects) as saver:
        _run(saver, model, first, "d", metadata={"run_id": run1})
        graph = build_graph(model.base_url, f"script:{second}").compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "d"}, "metadata": {"run_id": run2}}
        final = graph.invoke({"messages": [HumanMessage(content="and more", id="human-2")]}, config)
        by_run = {t.metadata.get("run_id") for t in saver.list({"configurable": {"thread_id": "d"}})}
        assert by_run == {run1, run2}
        saver.delete_for_runs([run1])
        left = list(saver.list({"configurable": {"thread_id": "d"}}))
    assert left and {t.metadata["run_id"] for t in left} == {run2}
    with RewindSaver(backend.reopen(objects)) as cold:
        # run2's checkpoints build on messages run1 stored: those values stayed.
        latest = cold.get_tuple({"configurable": {"thread_id": "d"}})
        assert summary(latest.checkpoint["channel_values"]["messages"]) == summary(final["messages"])
        assert isinstance(latest.checkpoint["channel_values"]["messages"][1], AIMessage)


def test_delete_thread_erases_every_object_of_the_thread_and_only_those(backend: Backend,
                                                                          model: ScriptedModelServer) -> None:
    script = _long_script(model, 3)
    with RewindSaver(backend.objects()) as saver:
        _run(saver, model, script, "gone")
        _run(saver, model, script, "stays")
        saver.copy_thread("stays", "copy")
        assert _thread_keys(backend, saver, "gone")
        saver.delete_thread("gone")
        assert _thread_keys(backend, saver, "gone") == []
        assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None
        kept, copied = (saver.get_tuple({"configurable": {"thread_id": t}}) for t in ("stays", "copy"))
        assert summary(kept.checkpoint["channel_values"]["messages"]) == summary(copied.checkpoint["channel_values"]["messages"])
    leftovers = [k for k in backend.all_keys() if "/threads/gone/" in k]
    assert leftovers == []


def test_a_saver_with_a_stricter_allowlist_shares_the_store_and_its_thread(backend: Backend) -> None:
    # Strict msgpack (no module allowed beyond LangGraph's safe types): LangGraph asks the saver
    # for a clone that also allows the graph's own types.
    with RewindSaver(backend.objects(), serde=JsonPlusSerializer(allowed_msgpack_modules=None)) as saver:
        clone = saver.with_allowlist([("tests", "Thing")])
        assert clone is not saver and clone.serde is not saver.serde
        config = _put(clone, "t", {"items": _items(1, 2)})
        assert saver.get_tuple(config).checkpoint["channel_values"]["items"] == _items(1, 2)
        assert clone._runner is saver._runner
