"""What crosses between a pipeline's code and its run (workflow code: deterministic, no I/O):
the conversation a `ctx.llm` call sends, a structured output's schema and its parsing, the
code's answer and state as JSON, and the code's failure as one line naming where it happened.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import pydantic

from workflows.vocabulary.errors import PipelineError

# What the model is told when its structured answer does not validate (a repair's message).
REPAIR_PROMPT = ("Your answer is not valid for the required JSON schema: {error}. "
                 "Answer again with only a JSON object that matches the schema.")


def state_copy(state: dict[str, Any]) -> dict[str, Any]:
    """ctx.state as the checkpoint keeps it: a JSON copy (what is not JSON is an error now,
    not a checkpoint that cannot be written)."""
    try:
        return json.loads(json.dumps(state))
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"ctx.state holds a value that is not JSON ({exc}); keep str, numbers, bools, None, "
                            "lists and dicts in it (a pydantic model: .model_dump(mode='json'))") from None


def conversation(label: str, messages: list[dict[str, Any]] | None, system: str | None,
                  user: str | None) -> list[dict[str, Any]]:
    if messages is not None:
        if system is not None or user is not None:
            raise PipelineError(f"model call {label!r}: give messages=, or system= and user=, not both")
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise PipelineError(f"model call {label!r}: messages must be a list of chat messages "
                                "({'role': ..., 'content': ...})")
        return [dict(m) for m in messages]
    if user is None:
        raise PipelineError(f"model call {label!r} has nothing to say: give user= (and system=) or messages=")
    out = [{"role": "system", "content": system}] if system is not None else []
    return [*out, {"role": "user", "content": user}]


def response_format(output: type[pydantic.BaseModel]) -> dict[str, Any]:
    return {"type": "json_schema",
            "json_schema": {"name": output.__name__, "schema": output.model_json_schema(), "strict": False}}


def parse_output(output: type[pydantic.BaseModel], message: dict[str, Any]) -> tuple[str | None, Any]:
    text = message.get("content")
    if not isinstance(text, str) or not text.strip():
        return "the answer has no text content", None
    try:
        return None, output.model_validate_json(json_part(text))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the answer"
        more = len(exc.errors()) - 1
        return f"{where}: {first['msg']}" + (f" (+{more} more)" if more else ""), None


def json_part(text: str) -> str:
    """The JSON in an answer, without a Markdown fence a model may wrap it in."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped.strip()


def answer_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, pydantic.BaseModel):
        return result.model_dump_json()
    if result is None:
        return ""
    try:
        return json.dumps(result, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"the pipeline returned a {type(result).__name__}, which is not JSON ({exc}); "
                            "return a str, a dict / list of JSON values or a pydantic model") from None


def pipeline_failure(name: str, module: str, exc: BaseException, kind: str = "pipeline") -> str:
    """One line: what the pipeline (or graph) raised and where in its code."""
    where = user_frame(exc, module)
    restricted = type(exc).__name__ == "RestrictedWorkflowAccessError"
    if restricted and kind == "graph":
        what = getattr(exc, "qualified_name", "") or str(exc).split(" from inside", 1)[0].removeprefix("Cannot access ")
        what = what.removesuffix(".__call__").removeprefix("__builtins__.").removeprefix("builtins.")
        return (f"graph {name} called {what}{where}: outside its nodes (in its routing code, a conditional "
                "edge's function, or an @entrypoint's own code) a graph runs as durable workflow code, which must "
                "not read the clock, draw random numbers or do I/O; do that in a node (or an @task), which runs as "
                "an activity when it does")
    if restricted:
        what = getattr(exc, "qualified_name", "") or str(exc).split(" from inside", 1)[0].removeprefix("Cannot access ")
        what = what.removesuffix(".__call__").removeprefix("__builtins__.").removeprefix("builtins.")
        return (f"pipeline {name} called {what}{where}: pipeline code runs as durable workflow code and must not "
                "read the clock, draw random numbers or do I/O itself; use ctx.now(), ctx.random() or "
                "ctx.sleep(), and put I/O in a @tool called with ctx.tool(...)")
    if isinstance(exc, PipelineError):
        return f"{kind} {name}{where}: {exc}"
    return f"{kind} {name} raised {type(exc).__name__}{where}: {exc}"


def user_frame(exc: BaseException, module: str) -> str:
    """` in FUNCTION (FILE:LINE)`: the innermost frame of the pipeline's own module."""
    frames = traceback.extract_tb(exc.__traceback__)
    path = module.replace(".", "/")
    mine = [f for f in frames if f.filename.endswith(f"{path}.py") or f.filename.endswith(f"{path}/__init__.py")]
    if not mine:
        return ""
    frame = mine[-1]
    return f" in {frame.name} ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"


__all__ = ["REPAIR_PROMPT", "state_copy", "conversation", "response_format", "parse_output", "json_part", "answer_text", "pipeline_failure", "user_frame"]
