"""An offline, deterministic, OpenAI-compatible chat completions server.

Used by `rewind demo` when no OPENAI_API_KEY is set and by the test-suite,
which drives agents through the real `openai` client against it.

Every answer is a pure function of the request body: a request retried after
a worker crash gets the identical response (same id, content and tool call
ids), which is what durable replay needs. Nothing about the conversation is
kept between requests; only faults, scripts and the request log are state.

Models:
    script:NAME   plays the turns registered with `add_script(NAME, ...)` (a pipeline's script is
                  {"LABEL": [turns], ...}: each call plays its label's turns, the label read
                  from the X-Rewind-Label header); a turn with
                  "by_seed": {"2": turn} plays that turn for requests with seed 2, one with
                  "by_user": {"Initech": turn} that turn when the first user message
                  contains "Initech" (a sub-agent per company), a turn
                  {"error": {"status": 400, "message": "..."}} answers with that HTTP error,
                  and a turn with "stream": {"tokens_per_s": 30} streams at that pace
                  ("mode": "whole" or "refuse": as a provider that cannot stream)
    anything else a built-in policy, by the tools the request offers: the research agent
                  (search_company + save_report), the fan-out orchestrator (research_company,
                  a sub-agent: one call per company, then a synthesis of their answers) and
                  the company researcher (search_company alone: one search, then a profile)

Chat completions (/v1/chat/completions) and, for `ChatOpenAI(use_responses_api=True)`, a
response of the Responses API (/v1/responses) with the same answer; for `ChatAnthropic`
(base URL the server's root), a message of Anthropic's Messages API (/v1/messages), its
request read as the chat messages it says and answered as they would be.

Dialects (`dialect=` / `--dialect` / REWIND_SCRIPTED_DIALECT for the CLI):
    openai    (default) the checks below, as OpenAI answers them
    vllm      also vLLM's rejections of request messages, with its status and error body
    ollama    also Ollama's (/v1/chat/completions)
    llamacpp  also llama.cpp's llama-server's
Each rule in `DIALECTS` cites where the real server's behaviour comes from; a
conversation sent through `activities.model.wire_format.outgoing_messages` passes
every dialect.

Streaming (`stream: true`, rewind/worker/scripted_stream.py): the same answer as server-sent
events, in the chunks the dialect's server sends, `tokens_per_s=` / `--tokens-per-s` /
REWIND_SCRIPTED_TOKENS_PER_S apart (a script turn's "stream" over it); `stream_mode=` /
`--stream-mode` whole or refuse: a provider that cannot stream.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from rewind.worker import scripted_stream
from rewind.worker.scripted_stream import Pace
from workflows.vocabulary.contracts import DEFAULT_MODEL
from workflows.vocabulary.errors import ScriptError
from workflows.vocabulary.wire import DEMO_TURNS_FINGERPRINT, LABEL_HEADER

__all__ = ["DIALECTS", "ScriptedModelServer", "ScriptError", "main", "serve_until_stopped"]

# A fixed `created` keeps responses byte-identical across retries.
CREATED = 1_700_000_000
MODELS = (DEFAULT_MODEL, "rewind-research")
SCRIPT_PREFIX = "script:"
ROLES = {"system", "user", "assistant", "tool"}
QUOTE_CHARS = 300



class _ApiError(Exception):
    """An error answered to the client in OpenAI's error body shape."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 body: dict | None = None):
        super().__init__(message)
        # `body` is for dialects: another server words its errors in its own shape.
        self.status, self.body = status, body if body is not None else _error_body(status, message, code, param)


def _error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    # The openai client picks its exception class from the status; the type
    # string is what a human reading the log (or the client's message) sees.
    kind = {429: "rate_limit_error", 401: "authentication_error", 403: "permission_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(frozen=True)
class _Fault:
    status: int
    retry_after: float | None
    message: str | None
    delay_s: float
    # time.monotonic() past which the fault lapses unserved (None: it waits for a request)
    lapses_at: float | None = None
    # a streamed answer's connection drops after this many tokens
    cut_after: int | None = None


# ---------------------------------------------------------------- request parsing


def _text(content: Any) -> str:
    """The text of a message content: a string, None, or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _loads(arguments: Any) -> dict:
    # Arguments are whatever the model produced; scripts may send invalid JSON.
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _bad(message: str, param: str | None = None) -> _ApiError:
    return _ApiError(400, message, param=param)


def _validate(body: Any) -> None:
    """Reject what the real API rejects, with a message that says what is wrong."""
    if not isinstance(body, dict):
        raise _bad("Request body must be a JSON object.")
    if "stream" in body and not isinstance(body["stream"], (bool, type(None))):
        raise _bad(f"'stream' must be a boolean, got {body['stream']!r}.", "stream")
    options = body.get("stream_options")
    if options is not None:
        if not body.get("stream"):
            raise _bad("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise _bad("'stream_options' must be an object whose include_usage is a boolean.", "stream_options")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("'model' must be a non-empty string.", "model")
    tools = body.get("tools") or []
    for i, tool in enumerate(tools if isinstance(tools, list) else [None]):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or tool.get("type") != "function" or not fn.get("name"):
            raise _bad(f"tools[{i}] must be an object with type 'function' and a function.name.", f"tools[{i}]")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list.", "messages")
    seen: set[str] = set()
    pending: list[str] = []  # ids of the last assistant message's tool calls not yet answered
    for i, msg in enumerate(messages + [None]):  # None: the end also needs every call answered
        role = msg.get("role") if isinstance(msg, dict) else None
        if msg is not None and role not in ROLES:
            raise _bad(f"messages[{i}].role must be one of {sorted(ROLES)}, got {role!r}.", f"messages[{i}].role")
        if role == "tool":
            if msg.get("tool_call_id") not in pending:
                raise _bad(f"messages[{i}]: orphaned tool message; tool_call_id {msg.get('tool_call_id')!r} does "
                           "not answer a pending tool call of the preceding assistant message (or answers it twice).",
                           f"messages[{i}].tool_call_id")
            pending.remove(msg["tool_call_id"])
            continue
        if pending:
            raise _bad(f"messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages "
                       f"responding to each 'tool_call_id'; no response for: {', '.join(pending)}.", "messages")
        calls = msg.get("tool_calls") if role == "assistant" else None
        for call in calls if isinstance(calls, list) else []:
            call_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(call_id, str) or call_id in seen or not isinstance(call.get("function"), dict):
                raise _bad(f"messages[{i}]: tool call {call_id!r} needs a unique id and a function.", "messages")
            seen.add(call_id)
            pending.append(call_id)


# ---------------------------------------------------------------- dialects
#
# Real OpenAI-compatible servers reject different request messages, and with
# their own status codes and error bodies. A dialect adds one server's
# rejections (request-wide rules, run before the checks above) so tests can
# prove that what Rewind sends passes it. Each rule returns (status, message)
# for the first message it rejects, or None.

_Rejection = tuple[int, str] | None
_Rule = Callable[[list], _Rejection]


def _dicts(messages: list) -> list[tuple[int, dict]]:
    return [(i, m) for i, m in enumerate(messages) if isinstance(m, dict)]


def _calls(msg: dict) -> list[dict]:
    calls = msg.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _function(call: dict) -> dict:
    fn = call.get("function")
    return fn if isinstance(fn, dict) else {}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# -- llama.cpp: llama-server around b5350 (May 2025), whose handler wrapper answered every exception
#    as 500 "server_error" (examples/server/server.cpp `ex_wrapper`, since moved to tools/server/;
#    issue ggml-org/llama.cpp #13471 shows the body). Newer builds accept null content (PR #13477)
#    and answer std::invalid_argument with 400; message parsing errors stay 500.

def _llamacpp_body(status: int, message: str) -> dict:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"code": status, "message": message, "type": kind}}


def _llamacpp_content(messages: list) -> _Rejection:
    # examples/server/utils.hpp `oaicompat_chat_params_parse` before PR #13477: content must be a
    # string or an array of text parts; null is neither (issue #13471, #17700 for part types).
    # A missing content is fine next to tool_calls since PR #12293 (issue #12279).
    for _, msg in _dicts(messages):
        if msg.get("role") != "assistant" and "content" not in msg:
            return 500, "All non-assistant messages must contain 'content'"
        if msg.get("role") == "assistant" and "content" not in msg:
            if "tool_calls" not in msg:
                return 500, "Assistant message must contain either 'content' or 'tool_calls'!"
            continue
        content = msg["content"]
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            return 500, "Expected 'content' to be a string or an array"
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                return 500, ("image input is not supported - hint: if this is unexpected, "
                             "you may need to provide the mmproj")
            if kind != "text":
                return 500, "unsupported content[].type"
    return None


_NLOHMANN_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", dict: "object", list: "array"}


def _llamacpp_parse(messages: list) -> _Rejection:
    # common/chat.cpp `common_chat_msgs_parse_oaicompat`: each tool call needs type "function", a
    # function with a name and arguments; reasoning_content, name and tool_call_id are read into
    # std::string, so a null or non-string value throws nlohmann's type_error.302.
    for _, msg in _dicts(messages):
        for call in _calls(msg):
            if "type" not in call:
                return 500, f"Failed to parse messages: Missing tool call type: {_compact(call)}"
            if call["type"] != "function":
                return 500, f"Failed to parse messages: Unsupported tool call type: {_compact(call)}"
            if not isinstance(call.get("function"), dict):
                return 500, f"Failed to parse messages: Missing tool call function: {_compact(call)}"
            if "name" not in call["function"]:
                return 500, f"Failed to parse messages: Missing tool call name: {_compact(call)}"
            if "arguments" not in call["function"]:
                return 500, "Failed to parse messages: [json.exception.out_of_range.403] key 'arguments' not found"
        for key in ("reasoning_content", "name", "tool_call_id"):
            if key in msg and not isinstance(msg[key], str):
                kind = _NLOHMANN_TYPES.get(type(msg[key]), "object")
                return 500, ("Failed to parse messages: [json.exception.type_error.302] "
                             f"type must be string, but is {kind}")
    return None


# -- Ollama: middleware/openai.go `ChatMiddleware` answers every request error 400 with
#    openai.NewError ("invalid_request_error"), after Go's JSON binding and openai/openai.go
#    `FromChatRequest` (ollama/ollama v0.11.4+).

def _ollama_body(status: int, message: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


_GO_JSON_KINDS = {bool: "bool", int: "number", float: "number", str: "string", dict: "object", list: "array"}
_GO_TYPES = {type(None): "<nil>", bool: "bool", int: "float64", float: "float64", dict: "map[string]interface {}",
             list: "[]interface {}"}


def _ollama_binding(messages: list) -> _Rejection:
    # c.ShouldBindJSON into openai.Message / openai.ToolCall: these fields are Go strings (a JSON
    # null is fine, anything else is a decode error); arguments is a string, not an object.
    for _, msg in _dicts(messages):
        for key in ("role", "name", "tool_call_id", "reasoning"):
            value = msg.get(key)
            if value is not None and not isinstance(value, str):
                return 400, (f"json: cannot unmarshal {_GO_JSON_KINDS.get(type(value), 'object')} into Go struct "
                             f"field Message.messages.{key} of type string")
        calls = msg.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            return 400, (f"json: cannot unmarshal {_GO_JSON_KINDS.get(type(calls), 'object')} into Go struct "
                         "field Message.messages.tool_calls of type []openai.ToolCall")
        for call in _calls(msg):
            args = _function(call).get("arguments")
            if args is not None and not isinstance(args, str):
                return 400, (f"json: cannot unmarshal {_GO_JSON_KINDS.get(type(args), 'object')} into Go struct "
                             "field ToolCall.messages.tool_calls.function.arguments of type string")
    return None


def _ollama_arguments_ok(arguments: str) -> bool:
    # json.Unmarshal into api.ToolCallFunctionArguments (a map): an object, or null. Go's decoder
    # knows no NaN/Infinity, which Python's would accept.
    try:
        value = json.loads(arguments, parse_constant=_not_json)
    except ValueError:
        return False
    return value is None or isinstance(value, dict)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _ollama_messages(messages: list) -> _Rejection:
    # openai/openai.go `FromChatRequest`: content is a string or a list of text / image_url parts;
    # a null (or missing) content is allowed only when tool_calls is present and not null (since
    # v0.2.6, PR #5614), otherwise "invalid message content type: <nil>" (pydantic/pydantic-ai
    # #3406, #5206); every tool call's arguments must decode into an object (`FromCompletionToolCall`).
    for _, msg in _dicts(messages):
        content = msg.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if (kind == "text" and isinstance(part.get("text"), str)) or kind == "image_url":
                    continue
                return 400, "invalid message format"
        elif (content is None and msg.get("tool_calls") is None) or not isinstance(content, (str, type(None))):
            return 400, f"invalid message content type: {_GO_TYPES.get(type(content), 'map[string]interface {}')}"
        for call in _calls(msg):
            if not _ollama_arguments_ok(_function(call).get("arguments") or ""):
                return 400, "invalid tool call arguments"
    return None


# -- vLLM 0.20 to 0.25: vllm/entrypoints/chat_utils.py `_postprocess_messages` json.loads the
#    arguments of every replayed tool call for the chat template (fixed by PR #48922, which
#    coerces bad arguments to {}). Errors are answered as {"error": {..., "type": "BadRequestError",
#    "code": 400}} (issue vllm-project/vllm #43995).

def _vllm_body(status: int, message: str) -> dict:
    # The 500 body is this module's guess in the same shape; the issues show only its status.
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _vllm_arguments(messages: list) -> _Rejection:
    for i, msg in _dicts(messages):
        if msg.get("role") != "assistant":
            continue
        for j, call in enumerate(_calls(msg)):
            fn = _function(call)
            if "arguments" in fn and fn["arguments"] is None:
                # The request model types arguments as a string (issue #43851: "correctly rejected by Pydantic").
                return 400, f"messages.{i}.tool_calls.{j}.function.arguments: Input should be a valid string"
            args = fn.get("arguments")
            if not args or isinstance(args, dict):
                continue  # "" and missing become {} in _postprocess_messages
            try:
                value = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError as exc:
                return 400, str(exc)  # issue #43995: "Expecting ',' delimiter: line 1 column 54 (char 53)"
            if value is None:
                return 400, "'None' has no attribute 'items'"  # issue #43851: the template's arguments|items
            if not isinstance(value, dict):
                # issues #46328 / PR #47555: an AttributeError in the template, unhandled, so a 500.
                return 500, f"'{type(value).__name__}' object has no attribute 'items'"
    return None


@dataclass(frozen=True)
class _Dialect:
    rules: tuple[_Rule, ...]
    error_body: Callable[[int, str], dict]


DIALECTS: dict[str, _Dialect] = {
    # What `_validate` checks is how OpenAI answers; the default adds nothing to it.
    "openai": _Dialect(rules=(), error_body=_error_body),
    "vllm": _Dialect(rules=(_vllm_arguments,), error_body=_vllm_body),
    "ollama": _Dialect(rules=(_ollama_binding, _ollama_messages), error_body=_ollama_body),
    "llamacpp": _Dialect(rules=(_llamacpp_content, _llamacpp_parse), error_body=_llamacpp_body),
}


def _check_dialect(dialect: _Dialect, body: Any) -> None:
    """Raise the error the dialect's server answers to this request, if any."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return  # `_validate` words this one
    for rule in dialect.rules:
        rejection = rule(messages)
        if rejection is not None:
            status, message = rejection
            raise _ApiError(status, message, body=dialect.error_body(status, message))


# ---------------------------------------------------------------- policies

_Reply = tuple[str | None, list[tuple[str, str]]]  # content, [(tool name, arguments JSON)]


def _tool_results_since_last_assistant(messages: list[dict]) -> str:
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return "\n".join(_text(m.get("content")) for m in messages[last + 1:] if m["role"] == "tool")


def _responses_input(given: Any, instructions: Any) -> list[dict]:
    """A Responses API request's input as chat messages (text parts joined)."""
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    out = [{"role": "system", "content": str(instructions)}] if instructions else []
    for item in items:
        if not isinstance(item, dict) or item.get("role") not in ("system", "developer", "user", "assistant"):
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append({"role": "system" if item["role"] == "developer" else item["role"], "content": str(content or "")})
    return out


def _script_step(turns: list[dict], messages: list[dict], turn: int, seed: Any = None) -> dict:
    """The turn this request plays (its seed's or its task's variant when it has one)."""
    if turn >= len(turns):
        return {"content": "script exhausted"}
    step = turns[turn]
    # A turn may answer differently per sampling seed: {"by_seed": {"2": {...}}, ...the default}.
    step = (step.get("by_seed") or {}).get(str(seed), step)
    # ... and per task (a sub-agent per company): {"by_user": {"Initech": {...}}, ...the default}.
    first_user = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    return next((variant for text, variant in (step.get("by_user") or {}).items() if text in first_user), step)


def _script_reply(step: dict, messages: list[dict]) -> _Reply:
    error = step.get("error")
    if isinstance(error, dict):
        status = int(error.get("status", 400))
        raise _ApiError(status, str(error.get("message") or f"Scripted error: HTTP {status}."))
    content = _tool_results_since_last_assistant(messages) if step.get("echo_tool_results") else step.get("content")
    # String arguments go out verbatim so a script can play a model that emits invalid JSON.
    args = [c.get("arguments", {}) for c in step.get("tool_calls") or []]
    return content, [(c["name"], a if isinstance(a, str) else json.dumps(a))
                     for c, a in zip(step.get("tool_calls") or [], args)]


def _companies(text: str) -> list[str]:
    _, sep, rest = text.partition(":")
    parts = re.split(r",|\n|\s+and\s+", rest if sep else text)
    names = [p.strip().rstrip(".").strip() for p in parts]
    return list(dict.fromkeys(n for n in names if n))  # dedupe, keep order


def _failed(result: str) -> bool:
    return result.strip().lower().startswith("error")


# The system prompt picks the angle, so a fork that edits it visibly changes the report.
_ANGLES = {
    True: ("Technical analysis", "What the sources say about {}'s architecture, engineering practice and technical moat."),
    False: ("Business metrics", "What the sources say about {}'s revenue, growth, pricing and market share."),
}


def _report(companies: list[str], results: dict[str, str], technical: bool) -> str:
    section, sentence = _ANGLES[technical]
    lines = [f"# Competitive research: {', '.join(companies)}", "", f"_Angle: {section.lower()}._", ""]
    for name in companies:
        lines += [f"## {name}", ""]
        result = results.get(name)
        if result is None or _failed(result):
            lines += [f"no data ({result.strip() if result else 'not searched'})", ""]
            continue
        quote = result if len(result) <= QUOTE_CHARS else result[:QUOTE_CHARS].rstrip() + "…"
        lines += ["> " + line for line in quote.splitlines() or [""]]
        lines += ["", f"### {section}", "", sentence.format(name), ""]
    return "\n".join(lines).rstrip() + "\n"


def _builtin_reply(body: dict, messages: list[dict]) -> _Reply:
    """The built-in policy the request's tools call for."""
    tools = {t["function"]["name"] for t in body.get("tools") or []}
    if "research_company" in tools:
        return _fanout_reply(messages)
    if "search_company" in tools and "save_report" not in tools:
        return _researcher_reply(messages)
    return _research_reply(body, messages, tools)


def _calls_and_results(messages: list[dict]) -> list[tuple[str, dict, str]]:
    """(tool, arguments, result text) of every answered call, in order."""
    calls = {
        c["id"]: (c.get("function", {}).get("name"), _loads(c.get("function", {}).get("arguments")))
        for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
    }
    return [(*calls[m["tool_call_id"]], _text(m.get("content"))) for m in messages if m["role"] == "tool"]


def researcher_task(company: str) -> str:
    """What the fan-out orchestrator asks each researcher (the researcher reads the company back)."""
    return f"Research {company} and return a short profile."


def _fanout_reply(messages: list[dict]) -> _Reply:
    """An orchestrator: one `research_company` sub-agent call per company, in one step,
    then a synthesis that quotes each answer (and says which got none)."""
    first_user = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    companies = _companies(first_user)
    answers = {str(args.get("task", "")): result for name, args, result in _calls_and_results(messages)
               if name == "research_company"}
    if not answers:
        if not companies:
            return "Which companies should I research? Name them after a colon, separated by commas.", []
        return None, [("research_company", json.dumps({"task": researcher_task(c)})) for c in companies]
    lines = [f"Synthesis of {len(companies)} compan{'y' if len(companies) == 1 else 'ies'}:"]
    for company in companies:
        result = answers.get(researcher_task(company))
        lines.append(f"- {company}: " + ("no answer (" + result.strip()[:200] + ")" if result is None or _failed(result)
                                         else " ".join(result.split())[:QUOTE_CHARS]))
    done = sum(1 for c in companies if answers.get(researcher_task(c)) and not _failed(answers[researcher_task(c)]))
    lines.append(f"{done} of {len(companies)} researched.")
    return "\n".join(lines), []


def _researcher_reply(messages: list[dict]) -> _Reply:
    """A company researcher: one search, then a profile from the angle its system prompt asks for."""
    first_user = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    match = re.match(r"\s*Research (.+?) and return", first_user)
    company = (match.group(1) if match else first_user).strip().rstrip(".") or "the company"
    searched = [result for name, _args, result in _calls_and_results(messages) if name == "search_company"]
    if not searched:
        return None, [("search_company", json.dumps({"company": company}))]
    result = searched[-1]
    if _failed(result):
        return f"{company}: no data ({result.strip()[:200]})", []
    facts = _loads(result)
    if not facts:  # a search that answers in prose: its words are the profile
        return f"{company}: {' '.join(result.split())[:QUOTE_CHARS]}", []
    technical = any("technical" in _text(m.get("content")).lower() for m in messages if m["role"] == "system")
    if technical:
        return (f"{company} (technical): stack {facts.get('tech_stack', '?')}, {facts.get('patents', '?')} patents, "
                f"{facts.get('employees', '?')} engineers and staff."), []
    return (f"{company} (business): revenue ${facts.get('revenue_musd', '?')}M, growth {facts.get('growth_pct', '?')}%, "
            f"{facts.get('employees', '?')} employees, founded {facts.get('founded', '?')}."), []


def _research_reply(body: dict, messages: list[dict], tools: set[str]) -> _Reply:
    first_user = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    companies = _companies(first_user)
    if not {"search_company", "save_report"} <= tools:
        return f"I need the search_company and save_report tools to research {', '.join(companies) or 'anything'}.", []
    calls = {
        c["id"]: (c.get("function", {}).get("name"), _loads(c.get("function", {}).get("arguments")))
        for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
    }
    searched: dict[str, str] = {}
    saved: list[tuple[dict, str]] = []
    for m in messages:
        if m["role"] != "tool":
            continue
        name, args = calls[m["tool_call_id"]]
        if name == "search_company":
            searched[str(args.get("company", ""))] = _text(m.get("content"))
        elif name == "save_report":
            saved.append((args, _text(m.get("content"))))
    companies = companies or list(searched)
    technical = any("technical" in _text(m.get("content")).lower() for m in messages if m["role"] == "system")
    if saved:
        args, result = saved[-1]
        title = args.get("title", "untitled")
        if _failed(result):
            return f"Could not save the report '{title}' ({result.strip()}).", []
        no_data = sum(1 for c in companies if c not in searched or _failed(searched[c]))
        angle = "technical" if technical else "business"
        return (f"Saved the report '{title}' ({result.strip()}). Summary: researched {len(companies)} "
                f"compan{'y' if len(companies) == 1 else 'ies'} ({', '.join(companies)}) from a {angle} angle; {no_data} without data."), []
    if searched:
        report = {"title": f"Competitive research: {', '.join(companies)}",
                  "content": _report(companies, searched, technical)}
        return None, [("save_report", json.dumps(report))]
    if not companies:
        return "Which companies should I research? Name them after a colon, separated by commas.", []
    return None, [("search_company", json.dumps({"company": c})) for c in companies]


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _completion(body: dict, turn: int, reply: _Reply) -> dict:
    content, calls = reply
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{turn}_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    # Streamed or not, a request gets the same answer (its id too).
    asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    prompt = sum(
        _tokens(_text(m.get("content")))
        + sum(_tokens(str(c.get("function", {}).get("arguments", ""))) for c in m.get("tool_calls") or [])
        for m in body["messages"]
    )
    completion = _tokens(content or "") + sum(_tokens(args) for _, args in calls)
    return {
        "id": "chatcmpl-" + hashlib.sha256(canonical.encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": CREATED,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _anthropic_text(content: Any) -> str:
    """The text of an Anthropic content field: a string, or text blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _anthropic_messages(body: dict) -> list[dict]:
    """An Anthropic Messages request (`system`, `messages` of content blocks) as chat messages:
    tool_use blocks as the assistant's tool calls, tool_result blocks as tool messages."""
    chat: list[dict] = []
    if body.get("system"):
        chat.append({"role": "system", "content": _anthropic_text(body["system"])})
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            raise _bad("Each message must be an object with a role and content.", "messages")
        role, content = message.get("role"), message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if role == "assistant":
            calls = [{"id": b.get("id"), "type": "function",
                      "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                     for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
            chat.append({"role": "assistant", "content": _anthropic_text(blocks) or None,
                         **({"tool_calls": calls} if calls else {})})
            continue
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                chat.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                             "content": _anthropic_text(block.get("content"))})
        text = _anthropic_text([b for b in blocks if isinstance(b, dict) and b.get("type") == "text"])
        if text or not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            chat.append({"role": role, "content": text})
    return chat


def _anthropic_error(status: int, payload: dict) -> dict:
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
    message = (payload.get("error") or {}).get("message") if isinstance(payload.get("error"), dict) else None
    return {"type": "error", "error": {"type": kind, "message": message or f"HTTP {status}"}}


def _anthropic_message(completion: dict) -> dict:
    """A chat completion as the Messages API's answer: text and tool_use blocks, its usage."""
    message = completion["choices"][0]["message"]
    content: list[dict] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": call["id"].replace("call_", "toolu_", 1),
                        "name": call["function"]["name"], "input": _loads(call["function"]["arguments"])})
    usage = completion.get("usage") or {}
    return {"id": "msg_" + completion["id"].split("-", 1)[-1], "type": "message", "role": "assistant",
            "model": completion["model"], "content": content,
            "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


# ---------------------------------------------------------------- server


@web.middleware
async def _openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    # Unknown routes and wrong methods answer in the OpenAI shape too, so the
    # client raises NotFoundError etc. instead of failing to parse HTML.
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response(_error_body(exc.status, f"{exc.reason}: {request.method} {request.path}"), status=exc.status)


@dataclass(frozen=True)
class _Delivery:
    """How an answer goes out. `stream`: how a request that asked to stream is answered (sse,
    whole or refused; None: it did not ask), at `pace`; `cut_after`: a fault drops
    the connection (after that many tokens of a streamed answer)."""

    stream: str | None = None
    pace: Pace = Pace()
    cut_after: int | None = None


class ScriptedModelServer:
    """A chat completions server whose answers depend only on the request body."""

    def __init__(self, *, latency_ms: float = 0.0, host: str = "127.0.0.1", port: int = 0, dialect: str = "openai",
                 tokens_per_s: float = 0.0, stream_mode: str = "sse", arguments_tokens_per_s: float | None = None,
                 stream_usage: bool = True, chunk_times: bool = False):
        """`tokens_per_s`: how fast a streamed answer comes (0: as fast as it can be written; a
        script turn's "stream" sets its own), `arguments_tokens_per_s` its tool calls' arguments
        (None: as fast); `stream_mode` "whole" or "refuse": a provider that cannot stream
        (scripted_stream.py); `stream_usage` False: one whose streams never carry usage;
        `chunk_times`: each streamed request's log entry has `chunk_times`, when each token's
        chunk was written (time.time(): what a benchmark times a watcher's deltas against).
        `pace` may be set while the server runs."""
        if dialect not in DIALECTS:
            raise ScriptError(f"dialect must be one of {sorted(DIALECTS)}, got {dialect!r}")
        self.latency_ms, self.host, self.port, self.dialect = latency_ms, host, port, dialect
        self.pace = Pace(stream_mode, tokens_per_s, arguments_tokens_per_s)
        self.stream_usage = stream_usage
        self.chunk_times = chunk_times
        self.base_url = ""
        # One lock for all mutable state: the server may run in its own thread
        # while tests add scripts and faults from another.
        self._lock = threading.Lock()
        self._scripts: dict[str, list[dict]] = {}
        self._faults: deque[_Fault] = deque()
        self._log: list[dict] = []
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- state

    def add_script(self, name: str, turns: list[dict] | dict[str, list[dict]]) -> None:
        """`turns`: a list of turns, or (for a pipeline) {label: [turns]}, each label's calls
        answered from its own list (the call's X-Rewind-Label header names it)."""
        if isinstance(turns, dict):
            if not turns or not all(isinstance(k, str) and isinstance(v, list) for k, v in turns.items()):
                raise ScriptError(f"script {name!r}: a script by label is {{\"LABEL\": [turns], ...}}, got {turns!r}")
            for label, label_turns in turns.items():
                self._check_turns(f"{name}[{label}]", label_turns)
        else:
            self._check_turns(name, turns)
        with self._lock:
            self._scripts[name] = json.loads(json.dumps(turns))  # private copy

    @staticmethod
    def _check_turns(name: str, turns: Any) -> None:
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise ScriptError(f"script {name!r}: turns must be a list of objects, got {turns!r}")
        for i, t in enumerate(turns):
            for variant in [t, *(t.get("by_seed") or {}).values(), *(t.get("by_user") or {}).values()]:
                if not isinstance(variant, dict):
                    raise ScriptError(f"script {name!r} turn {i}: a by_seed / by_user variant must be an object")
                if not all(isinstance(c, dict) and c.get("name") for c in variant.get("tool_calls") or []):
                    raise ScriptError(f"script {name!r} turn {i}: every tool call needs a 'name'")
                error = variant.get("error")
                if error is not None and not (isinstance(error, dict) and 400 <= int(error.get("status", 400)) <= 599):
                    raise ScriptError(f"script {name!r} turn {i}: error must be {{\"status\": 400-599, \"message\": ...}}")
                if variant.get("stream") is not None:
                    scripted_stream.check_spec(variant["stream"], f"script {name!r} turn {i}")

    def inject_fault(self, status: int, count: int = 1, retry_after: float | None = None,
                     message: str | None = None, delay_s: float = 0.0, within_s: float | None = None,
                     cut_after: int | None = None) -> None:
        """Answer the next `count` requests with `status` (200: after `delay_s`, then normally).
        With `within_s`, only requests that arrive within that many seconds get the fault:
        an outage of a provider lasts a while, it does not wait for traffic to come. With
        `cut_after` (status 200), the connection drops after that many tokens of a streamed
        answer (before any answer to an unstreamed request)."""
        if not isinstance(status, int) or not (status == 200 or 400 <= status <= 599):
            raise ScriptError(f"fault status must be 200 or 400-599, got {status!r}")
        if not (isinstance(count, int) and count >= 1 and isinstance(delay_s, (int, float)) and delay_s >= 0
                and (retry_after is None or isinstance(retry_after, (int, float)) and retry_after >= 0)
                and (within_s is None or isinstance(within_s, (int, float)) and within_s > 0)
                and (cut_after is None or isinstance(cut_after, int) and cut_after >= 0 and status == 200)):
            raise ScriptError(f"fault needs an int count >= 1, numbers delay_s, retry_after >= 0 and within_s > 0, "
                              f"and cut_after an int >= 0 with status 200; got count={count!r}, delay_s={delay_s!r}, "
                              f"retry_after={retry_after!r}, within_s={within_s!r}, cut_after={cut_after!r}")
        lapses_at = None if within_s is None else time.monotonic() + within_s
        with self._lock:
            self._faults.extend([_Fault(status, retry_after, message, delay_s, lapses_at, cut_after)] * count)

    def _next_fault(self) -> _Fault | None:
        now = time.monotonic()
        with self._lock:
            while self._faults:
                fault = self._faults.popleft()
                if fault.lapses_at is None or now < fault.lapses_at:
                    return fault
        return None

    def requests(self) -> list[dict]:
        with self._lock:
            return json.loads(json.dumps(self._log))

    def reset(self) -> None:
        with self._lock:
            self._log.clear()
            self._faults.clear()
            self._scripts.clear()

    # -- HTTP handlers

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
            status, payload, headers, delivery = 400, _error_body(400, "Request body is not valid JSON."), {}, _Delivery()
        else:
            status, payload, headers, delivery = await self._answer(body, request.headers.get(LABEL_HEADER))
        b = body if isinstance(body, dict) else {}
        streamed = status == 200 and delivery.stream == "sse"
        chunks = (scripted_stream.chunks(payload, self.dialect, bool((b.get("stream_options") or {}).get("include_usage")),
                                         self.stream_usage) if streamed else [])
        entry = {
            "label": request.headers.get(LABEL_HEADER),
            "model": b.get("model"),
            "messages": b.get("messages"),
            "tools": [t["function"].get("name") for t in b.get("tools") or []
                      if isinstance(t, dict) and isinstance(t.get("function"), dict)],
            "status": status,
            "response": payload,
            "at": time.time(),
            # How a request that asked to stream was answered: sse, whole or refused (None: it did not ask).
            "stream": delivery.stream,
            "tokens": sum(1 for _, token in chunks if token is not None),  # the token chunks of a streamed answer
            "finished": not streamed,  # a streamed answer: once its last chunk went out
        }
        written: list[float] | None = None
        if streamed and self.chunk_times:
            written = entry["chunk_times"] = []  # filled as the chunks go out
        with self._lock:
            self._log.append(entry)
        if delivery.cut_after is not None and not streamed:
            if request.transport is not None:
                request.transport.abort()  # a connection lost before the answer
            return web.Response(status=status)
        if streamed:
            response, done = await scripted_stream.stream(request, chunks, delivery.pace, delivery.cut_after, written)
            with self._lock:
                entry["finished"] = done
            return response
        return web.json_response(payload, status=status, headers=headers)

    async def _responses(self, request: web.Request) -> web.Response:
        """OpenAI's Responses API (`ChatOpenAI(use_responses_api=True)`): its input as chat
        messages, answered as a chat completion is, the answer as a response object."""
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(_error_body(400, "Request body is not valid JSON."), status=400)
        b = body if isinstance(body, dict) else {}
        messages = _responses_input(b.get("input"), b.get("instructions"))
        label = request.headers.get(LABEL_HEADER)
        status, payload, headers, _ = await self._answer({"model": b.get("model"), "messages": messages}, label)
        with self._lock:
            self._log.append({"label": label, "model": b.get("model"), "messages": messages, "tools": [],
                              "status": status, "response": payload, "at": time.time(), "api": "responses"})
        if status != 200:
            return web.json_response(payload, status=status, headers=headers)
        message = payload["choices"][0]["message"]
        output: list[dict] = []
        if message.get("content"):
            output.append({"type": "message", "id": f"msg_{payload['id']}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
        for call in message.get("tool_calls") or []:
            output.append({"type": "function_call", "id": f"fc_{call['id']}", "call_id": call["id"],
                           "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                           "status": "completed"})
        usage = payload.get("usage") or {}
        return web.json_response({
            "id": f"resp_{payload['id']}", "object": "response", "created_at": CREATED, "model": payload["model"],
            "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0),
                      "total_tokens": usage.get("total_tokens", 0), "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}, headers=headers)

    async def _messages(self, request: web.Request) -> web.Response:
        """Anthropic's Messages API (`ChatAnthropic`, its base URL this server's root): the request
        as chat messages, answered as a chat completion is, the answer as an Anthropic message."""
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(_anthropic_error(400, _error_body(400, "Request body is not valid JSON.")),
                                     status=400)
        b = body if isinstance(body, dict) else {}
        label = request.headers.get(LABEL_HEADER)
        try:
            messages = _anthropic_messages(b)
        except _ApiError as exc:
            return web.json_response(_anthropic_error(exc.status, exc.body), status=exc.status)
        tools = [{"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                                   "parameters": t.get("input_schema") or {"type": "object"}}}
                 for t in b.get("tools") or [] if isinstance(t, dict)]
        chat = {"model": b.get("model"), "messages": messages, **({"tools": tools} if tools else {})}
        status, payload, headers, _ = await self._answer(chat, label)
        with self._lock:
            self._log.append({"label": label, "model": b.get("model"), "messages": messages,
                              "tools": [t["function"]["name"] for t in tools], "status": status, "response": payload,
                              "at": time.time(), "api": "messages"})
        if status != 200:
            return web.json_response(_anthropic_error(status, payload), status=status, headers=headers)
        return web.json_response(_anthropic_message(payload), headers=headers)

    async def _answer(self, body: Any, label: str | None = None) -> tuple[int, dict, dict[str, str], "_Delivery"]:
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        fault = self._next_fault()
        if fault is not None:
            await asyncio.sleep(fault.delay_s)
            if fault.status != 200:
                headers = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
                code = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(fault.status)
                text = fault.message or f"Injected fault: HTTP {fault.status}."
                return fault.status, _error_body(fault.status, text, code), headers, _Delivery()
        cut_after = fault.cut_after if fault is not None else None
        try:
            # The server's own parsing comes first: a real server rejects before it checks the rest.
            _check_dialect(DIALECTS[self.dialect], body)
            _validate(body)
            messages = body["messages"]
            turn = sum(1 for m in messages if m["role"] == "assistant")
            model: str = body["model"]
            if model.startswith(SCRIPT_PREFIX):
                name = model[len(SCRIPT_PREFIX):]
                with self._lock:
                    turns = self._scripts.get(name)
                if turns is None:
                    with self._lock:
                        known = ", ".join(sorted(self._scripts)) or "none"
                    raise _ApiError(404, f"The model '{model}' does not exist: no script named {name!r} was "
                                         f"registered (scripts known to this server: {known}; a worker loads them "
                                         "from REWIND_SCRIPTS or its --scripts, tests with add_script or POST "
                                         "/_admin/scripts/NAME).",
                                    code="model_not_found", param="model")
                if isinstance(turns, dict):  # a pipeline's script: each label's calls have their own turns
                    if label not in turns:
                        raise _ApiError(400, f"Script {name!r} answers the labels {', '.join(sorted(turns))}; this "
                                             f"call is labelled {label!r} (the {LABEL_HEADER} header).")
                    turns = turns[label]
                step = _script_step(turns, messages, turn, body.get("seed"))
                reply, pace = _script_reply(step, messages), self.pace.over(step.get("stream"))
            else:
                reply, pace = _builtin_reply(body, messages), self.pace
        except _ApiError as exc:
            return exc.status, exc.body, {}, _Delivery()
        answer = _completion(body, turn, reply)
        if not model.startswith(SCRIPT_PREFIX):
            answer["system_fingerprint"] = DEMO_TURNS_FINGERPRINT  # the caller can tell a demo turn
        if not body.get("stream"):
            return 200, answer, {}, _Delivery(cut_after=cut_after)
        if pace.mode == "refuse":
            refusal = (_error_body(400, scripted_stream.REFUSAL, "unsupported_value", "stream") if self.dialect == "openai"
                       else DIALECTS[self.dialect].error_body(400, scripted_stream.REFUSAL))
            return 400, refusal, {}, _Delivery("refused")
        return 200, answer, {}, _Delivery(pace.mode, pace, cut_after)

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "rewind"} for m in MODELS]
        return web.json_response({"object": "list", "data": data})

    async def _admin(self, request: web.Request) -> web.Response:
        # Every admin write is a JSON object mapped onto the Python API, so the
        # HTTP and in-process ways of scripting the server cannot drift apart.
        try:
            body = await request.json() if request.can_read_body else {}
            if not isinstance(body, dict):
                raise ScriptError("admin request body must be a JSON object")
            if "name" in request.match_info:
                self.add_script(request.match_info["name"], body.get("turns"))
            elif request.path.endswith("/faults"):
                self.inject_fault(**body)
            else:
                self.reset()
        except (ValueError, TypeError) as exc:  # ScriptError, bad JSON, unknown kwargs
            return web.json_response(_error_body(400, str(exc)), status=400)
        return web.json_response({"status": "ok"})

    async def _admin_requests(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests()})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    # -- lifecycle

    async def start(self) -> str:
        app = web.Application(middlewares=[_openai_errors])
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/_admin/scripts/{name}", self._admin)
        app.router.add_post("/_admin/faults", self._admin)
        app.router.add_post("/_admin/reset", self._admin)
        app.router.add_get("/_admin/requests", self._admin_requests)
        app.router.add_get("/_admin/health", self._health)
        # Stopping does not wait for answers a fault holds back (a hang of
        # minutes): their callers are gone or will retry elsewhere.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self) -> str:
        """Serve from a private event loop in a daemon thread, for sync callers."""
        loop = asyncio.new_event_loop()
        self._loop, self._thread = loop, threading.Thread(target=loop.run_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout=30)

    def stop_thread(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None


async def _serve(host: str, port: int, latency_ms: float, dialect: str, tokens_per_s: float, stream_mode: str) -> None:
    await serve_until_stopped(ScriptedModelServer(latency_ms=latency_ms, host=host, port=port, dialect=dialect,
                                                  tokens_per_s=tokens_per_s, stream_mode=stream_mode))


async def serve_until_stopped(server: ScriptedModelServer) -> None:
    """Serve `server` in this process, its base URL printed once it listens, until SIGINT or SIGTERM."""
    print(await server.start(), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rewind.worker.scripted_model", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port; the URL is printed")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="how long every answer takes to start")
    # The defaults come from the settings (REWIND_SCRIPTED_*): the library class never depends on them.
    from rewind.settings.config import Settings

    settings = Settings.from_env()
    parser.add_argument("--dialect", default=settings.scripted_dialect,
                        help=f"which server's request checks (and stream chunks) to emulate: {', '.join(DIALECTS)} "
                             "(default: $REWIND_SCRIPTED_DIALECT or openai)")
    parser.add_argument("--tokens-per-s", type=float, default=settings.scripted_tokens_per_s or 0.0,
                        help="how fast a streamed answer comes, tokens a second; 0 (the default, or "
                             "$REWIND_SCRIPTED_TOKENS_PER_S): as fast as it can be written; a script turn's "
                             "\"stream\": {\"tokens_per_s\": N} sets its own")
    parser.add_argument("--stream-mode", choices=scripted_stream.MODES, default="sse",
                        help="how a request with stream: true is answered: sse (server-sent events, the default), "
                             "whole (the whole completion as JSON) or refuse (a 400 naming stream): the last two "
                             "emulate a provider that cannot stream")
    args = parser.parse_args(argv)
    if args.dialect not in DIALECTS:  # argparse does not check a default against choices
        parser.error(f"--dialect must be one of {', '.join(DIALECTS)}, got {args.dialect!r}")
    try:
        Pace(args.stream_mode, args.tokens_per_s)
    except ScriptError as exc:
        parser.error(f"--tokens-per-s: {exc}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    asyncio.run(_serve(args.host, args.port, args.latency_ms, args.dialect, args.tokens_per_s, args.stream_mode))


if __name__ == "__main__":
    main()
