"""The request shape every OpenAI-compatible server accepts (activities/model/wire_format.py)."""

from __future__ import annotations

import copy
import json

import pytest

from activities.model.wire_format import UNPARSED_ARGUMENTS_KEY, outgoing_message, outgoing_messages, tool_arguments

CALL = {"id": "call_Xq1", "type": "function", "function": {"name": "search_company", "arguments": '{"company": "Acme"}'}}

# What OpenAI returns for a tool-calling turn, kept verbatim in the transcript.
OPENAI_TOOL_TURN = {"role": "assistant", "content": None, "refusal": None, "annotations": [], "tool_calls": [CALL]}

CONVERSATION = [
    {"role": "system", "content": "You are a business analyst."},
    {"role": "user", "content": "Research Acme."},
    OPENAI_TOOL_TURN,
    {"role": "tool", "tool_call_id": "call_Xq1", "content": "Acme sells widgets."},
    {"role": "assistant", "content": "Acme sells widgets.", "refusal": None, "annotations": [], "audio": None,
     "function_call": None, "tool_calls": None, "reasoning_content": None},
]


def test_real_openai_tool_turn_goes_out_with_empty_string_content():
    assert outgoing_message(OPENAI_TOOL_TURN) == {"role": "assistant", "content": "", "tool_calls": [CALL]}


def test_tool_calls_keep_ids_types_names_and_arguments_exactly():
    calls = [CALL, {**CALL, "id": "call_2", "function": {"name": "save_report", "arguments": '{ "title" :"r" }'}}]
    out = outgoing_message({"role": "assistant", "content": "", "tool_calls": calls})
    assert out["tool_calls"] == calls  # byte for byte, including odd spacing inside arguments


@pytest.mark.parametrize("key", ["refusal", "annotations", "audio", "function_call", "reasoning_content",
                                 "reasoning", "parsed", "index"])
def test_keys_the_api_does_not_need_back_are_dropped(key):
    msg = {"role": "assistant", "content": "hi", key: {"id": "a"} if key == "audio" else []}
    assert outgoing_message(msg) == {"role": "assistant", "content": "hi"}


def test_null_content_becomes_empty_string_for_every_role():
    for role in ("system", "user", "assistant"):
        assert outgoing_message({"role": role, "content": None})["content"] == ""
    assert outgoing_message({"role": "assistant"})["content"] == ""  # missing, not only null


def test_a_refusal_becomes_the_content_the_model_sees():
    msg = {"role": "assistant", "content": None, "refusal": "I can't help with that.", "annotations": []}
    assert outgoing_message(msg) == {"role": "assistant", "content": "I can't help with that."}
    # A non-empty content wins; the refusal key never goes out.
    assert outgoing_message({"role": "assistant", "content": "ok", "refusal": "no"}) == {"role": "assistant", "content": "ok"}


def test_empty_or_null_tool_calls_are_dropped():
    for calls in ([], None):
        assert "tool_calls" not in outgoing_message({"role": "assistant", "content": "x", "tool_calls": calls})


def test_text_parts_are_joined_into_one_string():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "annotations": []}]
    assert outgoing_message({"role": "user", "content": parts})["content"] == "a\nb"
    refusal = [{"type": "refusal", "refusal": "no"}]
    assert outgoing_message({"role": "assistant", "content": refusal})["content"] == "no"
    assert outgoing_message({"role": "user", "content": []})["content"] == ""


def test_image_parts_are_left_as_parts():
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]
    out = outgoing_message({"role": "user", "content": parts})
    assert out["content"] == parts and out["content"] is not parts


def test_tool_messages_carry_string_content_and_their_call_id_only():
    out = outgoing_message({"role": "tool", "tool_call_id": "c1", "name": "search_company",
                            "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]})
    assert out == {"role": "tool", "content": "line 1\nline 2", "tool_call_id": "c1"}
    assert outgoing_message({"role": "tool", "tool_call_id": "c1", "content": None})["content"] == ""
    assert outgoing_message({"role": "tool", "tool_call_id": "c1", "content": {"rows": 2}})["content"] == '{"rows": 2}'
    mixed = [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}]
    assert json.loads(outgoing_message({"role": "tool", "tool_call_id": "c1", "content": mixed})["content"]) == mixed


def test_name_is_kept_only_as_a_non_empty_string():
    assert outgoing_message({"role": "user", "content": "x", "name": "ana"})["name"] == "ana"
    for name in (None, "", 3):
        assert "name" not in outgoing_message({"role": "user", "content": "x", "name": name})


def test_missing_tool_call_type_defaults_to_function_and_extra_keys_go():
    call = {"id": "c", "index": 0, "function": {"name": "f", "arguments": "{}", "extra": 1}}
    out = outgoing_message({"role": "assistant", "content": None, "tool_calls": [call]})["tool_calls"][0]
    assert out == {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert list(out) == ["id", "type", "function"]


def test_other_tool_call_types_pass_untouched():
    custom = {"id": "c", "type": "custom", "custom": {"name": "grep", "input": "x"}}
    assert outgoing_message({"role": "assistant", "content": "", "tool_calls": [custom]})["tool_calls"] == [custom]


@pytest.mark.parametrize("arguments,expected", [
    ('{"company": "Acme"}', '{"company": "Acme"}'),           # a JSON object: kept exactly
    ({"company": "Acmé"}, '{"company":"Acmé"}'),               # an object: serialized
    (None, "{}"), ("", "{}"), ("  ", "{}"),                    # no arguments
])
def test_arguments_are_a_json_object_string(arguments, expected):
    assert tool_arguments(arguments) == expected


@pytest.mark.parametrize("arguments", ['{"company": "Acme', "null", '"Acme"', "[1, 2]", "42", '{"a": NaN}', [1, 2]])
def test_arguments_that_are_not_an_object_are_wrapped_with_their_text(arguments):
    out = json.loads(tool_arguments(arguments))
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    assert out == {UNPARSED_ARGUMENTS_KEY: raw}


def test_unknown_roles_only_lose_nulls():
    msg = {"role": "function", "name": "f", "content": "x", "extra": None}
    assert outgoing_message(msg) == {"role": "function", "name": "f", "content": "x"}


def test_the_input_is_never_mutated_or_shared():
    conversation = copy.deepcopy(CONVERSATION) + [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "k", "type": "custom", "custom": {"input": "x"}}]},
    ]
    before = copy.deepcopy(conversation)
    out = outgoing_messages(conversation)
    assert conversation == before
    out[2]["tool_calls"][0]["function"]["name"] = "changed"
    out[-2]["content"][0]["image_url"]["url"] = "changed"
    out[-1]["tool_calls"][0]["custom"]["input"] = "changed"
    assert conversation == before


def test_a_whole_openai_conversation():
    assert outgoing_messages(CONVERSATION) == [
        {"role": "system", "content": "You are a business analyst."},
        {"role": "user", "content": "Research Acme."},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "Acme sells widgets.", "tool_call_id": "call_Xq1"},
        {"role": "assistant", "content": "Acme sells widgets."},
    ]


WEIRD = CONVERSATION + [
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "tool_calls": []},
    {"role": "assistant", "content": None, "refusal": "no", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": '{"x": 1'}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"y": [1, 2]}}},
        {"id": "c", "type": "function", "function": {"name": "h"}},
    ]},
    {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "bad"}]},
    {"role": "developer", "content": [{"type": "text", "text": "be brief"}], "name": None},
    {"role": "mystery", "content": None, "x": 1},
    "not a message",
]


@pytest.mark.parametrize("messages", [CONVERSATION, WEIRD], ids=["openai", "weird"])
def test_idempotent_and_deterministic(messages):
    once = outgoing_messages(messages)
    assert outgoing_messages(once) == once
    assert json.dumps(outgoing_messages(copy.deepcopy(messages))) == json.dumps(once)  # same bytes every time


def test_projections_are_remembered_and_never_stale():
    """Each message is projected once per worker; an equal message gets the same
    projection, a changed one (other arguments, other content) its own."""
    from activities.model.wire_format import outgoing_message, outgoing_messages

    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "index": 0, "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "out", "extra": None}
    first = outgoing_messages([call, tool])
    assert first == [outgoing_message(call), outgoing_message(tool)]
    again = outgoing_messages([dict(call), dict(tool)])
    assert again == first
    edited = {**call, "tool_calls": [{**call["tool_calls"][0], "function": {"name": "f", "arguments": "not json"}}]}
    assert outgoing_messages([edited]) == [outgoing_message(edited)] != [first[0]]
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert outgoing_messages([parts]) == [outgoing_message(parts)]
    assert outgoing_messages([{**tool, "content": "other"}])[0]["content"] == "other"


def test_a_message_changed_in_place_is_projected_again():
    """The same message object is looked up by identity (its content key is not built
    again on every call); a message changed in place since is not served the old projection."""
    from activities.model.wire_format import outgoing_message, outgoing_messages

    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    first = outgoing_messages([message])[0]
    assert outgoing_messages([message])[0] is first  # served by identity
    message["content"] = "now it says something"
    assert outgoing_messages([message])[0] == outgoing_message(message) != first
    message["tool_calls"] = [{"id": "c10", "type": "function", "function": {"name": "g", "arguments": '{"x": 1}'}}]
    assert outgoing_messages([message])[0]["tool_calls"][0]["id"] == "c10"
    message["name"] = "someone"
    assert outgoing_messages([message])[0] == outgoing_message(message)
