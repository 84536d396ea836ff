"""Offline token counting and context-window compression of the agent's history."""

from __future__ import annotations

import copy
import gzip
import json
import random
import socket
import threading
import time
import uuid
import warnings

import pytest
import tiktoken_ext.openai_public as openai_public

from activities.model import tokens
from activities.model.context_window import (
    check_pairing,
    compress_messages,
    rebuild_view,
    turn_boundary,
)
from activities.model.tokens import (
    EncodingDataError,
    TokenizerFallbackWarning,
    count_message_tokens,
    encoding_for_model,
    load_encoding,
)
from rewind.worker.scripted_model import _validate  # the scripted server's own 400 check

MODEL = "gpt-4o-mini"
WORDS = "alpha beta gamma delta revenue Acme Globex 2024 42 search report failed ok — ünïcode 東京".split()


# ---------------------------------------------------------------- tokens


def test_encodings_load_offline_without_touching_the_network(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("token counting tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokens, "_loaded", {})  # force a cold load in this process

    started = time.monotonic()
    o200k, cl100k = encoding_for_model("gpt-4o"), encoding_for_model("gpt-4")
    assert time.monotonic() - started < 10  # ~0.4 s each; a network attempt would hang or fail
    assert (o200k.name, cl100k.name) == ("o200k_base", "cl100k_base")
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or cached
    assert encoding_for_model("gpt-4o") is o200k  # loaded once per process


def test_known_token_ids():
    o200k, cl100k = load_encoding("o200k_base"), load_encoding("cl100k_base")
    assert o200k.encode("hello world") == [24912, 2375]
    assert cl100k.encode("hello world") == [15339, 1917]
    assert cl100k.encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert (o200k.n_vocab, cl100k.n_vocab) == (200019, 100277)
    text = "Grüße aus 東京 🚀 — def f(x): return x**2\n\n"
    assert o200k.decode(o200k.encode(text)) == text


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_definitions_match_the_installed_tiktoken(monkeypatch, name):
    # Build tiktoken's own definition without its download, then compare.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: {})
    theirs = getattr(openai_public, name)()
    ours = load_encoding(name)
    assert ours._pat_str == theirs["pat_str"]
    assert ours._special_tokens == theirs["special_tokens"]


@pytest.mark.parametrize("model,expected", [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini", "o200k_base"), ("gpt-4.1-mini", "o200k_base"),
    ("gpt-5", "o200k_base"), ("gpt-5-mini", "o200k_base"), ("o1", "o200k_base"), ("o3-mini", "o200k_base"),
    ("o4-mini", "o200k_base"), ("openai/gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base"),
    ("gpt-4-turbo", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"),
])
def test_model_encodings(model, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # known models must not warn
        assert encoding_for_model(model).name == expected


def test_unknown_model_falls_back_with_one_warning():
    model = f"local-llama-{uuid.uuid4().hex[:8]}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert encoding_for_model(model).name == "o200k_base"
        encoding_for_model(model)
        count_message_tokens([{"role": "user", "content": "hi"}], model)
    fallback = [w for w in caught if issubclass(w.category, TokenizerFallbackWarning)]
    assert len(fallback) == 1
    assert model in str(fallback[0].message) and "o200k_base" in str(fallback[0].message)


def test_missing_or_corrupt_data_says_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(tokens, "_loaded", {})
    monkeypatch.setattr(tokens, "ENCODINGS_DIR", tmp_path)
    with pytest.raises(EncodingDataError, match="package-data"):
        load_encoding("o200k_base")
    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"IQ== 0\n"))
    with pytest.raises(EncodingDataError, match="SHA-256"):
        load_encoding("o200k_base")
    with pytest.raises(EncodingDataError, match="not bundled"):
        load_encoding("p50k_base")


def test_a_worker_builds_the_encoding_in_the_background(monkeypatch):
    # 0.5-0.6 s that a new worker's first model call spent before it could count a token.
    monkeypatch.setattr(tokens, "_loaded", {})
    thread = tokens.preload("o200k_base")
    thread.join(30)
    assert not thread.is_alive() and load_encoding("o200k_base") is tokens._loaded["o200k_base"]
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    tokens.preload("p50k_base").join(5)  # not bundled: the model call that needs it says so
    assert raised == []


def test_message_accounting():
    user = {"role": "user", "content": "hello world"}
    assert count_message_tokens([user], "gpt-4o") == 3 + (3 + 1 + 2)  # priming + framing, role, text
    assert count_message_tokens([{**user, "name": "ann"}], "gpt-4o") > count_message_tokens([user], "gpt-4o") + 1
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "acme"}'}}]}
    reply = {"role": "tool", "tool_call_id": "call_1", "content": "Acme makes anvils."}
    assert count_message_tokens([call, reply], "gpt-4o") > count_message_tokens([], "gpt-4o") + 2 * 3 + 10
    parts = {"role": "user", "content": [{"type": "text", "text": "hello world"}]}
    assert count_message_tokens([parts], "gpt-4o") == count_message_tokens([user], "gpt-4o")
    # Special-token text in user data is plain text, not an error.
    assert count_message_tokens([{"role": "user", "content": "<|endoftext|>"}], "gpt-4o") > 7


# ---------------------------------------------------------------- conversations


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _conversation(rng: random.Random) -> list[dict]:
    msgs: list[dict] = []
    if rng.random() < 0.85:
        msgs.append({"role": "system", "content": _text(rng, 3, 30)})
    msgs.append({"role": "user", "content": _text(rng, 1, 20)})
    n = 0
    for _ in range(rng.randint(0, 14)):
        r = rng.random()
        if r < 0.2:
            msgs.append({"role": "user", "content": _text(rng, 1, 30)})
        elif r < 0.32:
            msgs.append({"role": "assistant", "content": _text(rng, 1, 60)})
        elif r < 0.36:
            msgs.append({"role": "system", "content": _text(rng, 1, 10)})
        else:
            ids = [f"call_{(n := n + 1)}" for _ in range(rng.randint(1, 3))]
            msgs.append({"role": "assistant", "content": rng.choice([None, _text(rng, 1, 10)]), "tool_calls": [
                {"id": i, "type": "function",
                 "function": {"name": "search", "arguments": json.dumps({"q": _text(rng, 1, 4)})}} for i in ids]})
            rng.shuffle(ids)  # replies may come in any order
            msgs += [{"role": "tool", "tool_call_id": i, "content": _text(rng, 0, 700)} for i in ids]
    if rng.random() < 0.5:
        msgs.append({"role": "assistant", "content": _text(rng, 1, 40)})
    assert check_pairing(msgs) == []
    return msgs


def _research(n_calls: int = 5, result_chars: int = 4000) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a research agent."},
            {"role": "user", "content": "Research Acme, Globex and Initech."}]
    for k in range(n_calls):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": "q{k}"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": (f"result {k} " * 1000)[:result_chars]})
    msgs.append({"role": "assistant", "content": "Here is the report."})
    return msgs


def _tokens(msgs: list[dict]) -> int:
    return count_message_tokens(msgs, MODEL)


# ---------------------------------------------------------------- compression


def test_under_budget_is_returned_unchanged():
    msgs = _research()
    result = compress_messages(msgs, model=MODEL, budget_tokens=_tokens(msgs))
    assert result.messages is msgs and not result.compressed and not result.over_budget
    assert result.actions == [] and result.tokens_before == result.tokens_after == _tokens(msgs)


def test_oldest_tool_results_are_truncated_first():
    msgs = _research()
    result = compress_messages(msgs, model=MODEL, budget_tokens=_tokens(msgs) - 50, keep_last=2)
    assert result.actions == [{"index": 3, "action": "truncated_tool_result", "from_chars": 4000, "to_chars": 400}]
    assert result.messages[3]["content"] == msgs[3]["content"][:400] + "… [truncated by Rewind: 4000 → 400 chars]"
    assert result.messages[5:] == msgs[5:] and result.tokens_after <= _tokens(msgs) - 50


def test_turns_are_dropped_with_their_replies_and_a_note():
    msgs = _research(n_calls=6)  # 6 calls with 4000-char results: ~8k tokens
    result = compress_messages(msgs, model=MODEL, budget_tokens=2000, keep_last=2)
    assert result.compressed and not result.over_budget and result.tokens_after <= 2000
    assert check_pairing(result.messages) == []
    truncated = [a["index"] for a in result.actions if a["action"] == "truncated_tool_result"]
    dropped = [a for a in result.actions if a["action"] == "dropped_turn"]
    assert truncated == [3, 5, 7, 9, 11]  # every old result shortened before any turn goes
    assert [(a["index"], a["messages"]) for a in dropped] == [(2, 2), (4, 2)]  # oldest first, with replies
    assert result.messages[0] == msgs[0] and result.messages[2] == msgs[1]
    assert result.messages[1] == {"role": "system",
                                  "content": "[Rewind: 4 earlier messages omitted to fit the context window]"}
    assert result.messages[-3:] == msgs[-3:]  # keep_last=2 widened back to the assistant's call
    assert rebuild_view(msgs, result.actions) == result.messages


def test_kept_messages_over_budget_are_returned_with_a_flag():
    msgs = _research(n_calls=3)
    result = compress_messages(msgs, model=MODEL, budget_tokens=20, keep_last=2)
    assert result.compressed and result.over_budget and result.tokens_after > 20
    # Everything droppable is gone; the note is left out since it cannot fit either.
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert result.messages[-3:] == msgs[-3:] and check_pairing(result.messages) == []


def test_random_conversations_never_break_the_rules():
    for seed in range(400):
        rng = random.Random(seed)
        msgs = _conversation(rng)
        original = copy.deepcopy(msgs)
        before = _tokens(msgs)
        keep_last, budget = rng.randint(0, 8), rng.randint(0, int(before * 1.1))
        result = compress_messages(msgs, model=MODEL, budget_tokens=budget, keep_last=keep_last,
                                   tool_result_chars=rng.choice([0, 50, 400]))
        out, where = result.messages, f"seed {seed}"
        assert msgs == original, where  # the input is never mutated
        assert check_pairing(out) == [], where
        _validate({"model": MODEL, "messages": out})  # what the scripted server (like OpenAI) accepts
        assert result.tokens_before == before and result.tokens_after == _tokens(out), where
        assert result.over_budget == (result.tokens_after > budget), where
        assert result.compressed == (before > budget), where
        assert rebuild_view(msgs, result.actions) == out, where
        # System and user messages all survive, in order; so does the widened tail.
        assert [m for m in out if m["role"] == "user"] == [m for m in msgs if m["role"] == "user"], where
        assert [m for m in msgs if m["role"] == "system"] == \
            [m for m in out if m["role"] == "system" and not m["content"].startswith("[Rewind:")], where
        start = turn_boundary(msgs, len(msgs) - keep_last if keep_last else len(msgs))
        assert out[len(out) - (len(msgs) - start):] == msgs[start:], where
        if result.over_budget:  # best effort: nothing droppable is left before the tail
            assert all(m["role"] != "assistant" for m in out[:len(out) - (len(msgs) - start)]), where


def test_token_counts_are_remembered_and_never_stale():
    """A model call re-counts the whole conversation at every step; counts are memoized by
    what they count, so a changed message (a shortened result, an edited call) is counted anew."""
    from activities.model import tokens

    encoding = tokens.load_encoding("o200k_base")
    message = {"role": "tool", "tool_call_id": "call_1", "content": "word " * 500}
    first = tokens.message_tokens(message, encoding)
    assert first == tokens._count_message_tokens(message, encoding)
    assert tokens.message_tokens(dict(message), encoding) == first  # an equal message: from the memo
    shorter = {**message, "content": "word " * 10}
    assert tokens.message_tokens(shorter, encoding) == tokens._count_message_tokens(shorter, encoding) < first
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    edited = {**call, "tool_calls": [{**call["tool_calls"][0], "function": {"name": "f", "arguments": '{"a": 12345678}'}}]}
    assert tokens.message_tokens(edited, encoding) == tokens._count_message_tokens(edited, encoding)
    assert tokens.message_tokens(edited, encoding) > tokens.message_tokens(call, encoding)
    parts = {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    assert tokens.message_tokens(parts, encoding) == tokens._count_message_tokens(parts, encoding)
