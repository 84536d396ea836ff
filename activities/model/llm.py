"""The model-call activity.

The OpenAI client is built with max_retries=0: Temporal owns every retry, so
each attempt is visible in the run's history and there are not two stacked
retry layers. HTTP status decides what retrying can fix (408/409/429/5xx and
connection errors) and what it cannot (400/401/403/404/422), and `retry-after`
becomes the next retry delay.

Credentials stay on the worker (environment), never in workflow inputs, so no
API key reaches Temporal history. Error messages (a 401 can echo the key) and
the model's reply (a model can repeat a secret it read) are redacted before
they leave the activity (rewind/redaction.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.record.checkpoint_writer import CheckpointWriter, written_beside
from activities.model.context_window import check_pairing, compact_actions, compress_messages
from activities.liveness.heartbeat import heartbeating
from activities.model.prompt_fit import PromptFitter
from activities.model.pricing import PriceTable
from activities.record.spans import activity_span
from activities.model.tokens import REPLY_PRIMING_TOKENS, count_message_tokens, preload
from activities.record.live import CallEvents
from activities.model.streaming import StreamBroken, assembled
from activities.record.redaction import NO_REDACTION, Redactor
from checkpoint_bridge.events.bus import Publisher
from activities.model.transcript import TranscriptError, TranscriptStore
from checkpoint_bridge.checkpoints.outputs import OutputStore
from activities.model.wire_format import outgoing_messages
from workflows.vocabulary.contracts import CarriedWrite, LlmRequest, LlmResponse, Usage
from workflows.vocabulary.errors import StoreUnavailableError
from workflows.vocabulary.text import scrub_surrogates
from workflows.loop import tracing as names
from workflows.vocabulary.events import model_call_key
from workflows.vocabulary.wire import CALL_LLM, DEMO_TURNS_FINGERPRINT, LABEL_HEADER, LLM_REJECTED

log = logging.getLogger("rewind.model")

RETRYABLE_STATUS = {408, 409, 429}
REJECTED_ERROR_TYPE = LLM_REJECTED

_HINTS = {
    400: "the request was malformed; the run cannot continue as it is",
    401: "check OPENAI_API_KEY on the worker",
    403: "the key has no access to this model or endpoint",
    404: "check the model name and OPENAI_BASE_URL",
    422: "the request was malformed; the run cannot continue as it is",
}

# Failures are raised without their cause chain (`from None`) and with short
# messages: Temporal keeps at most ~2 KB of a retrying activity's last failure
# and replaces a larger one with "Failure exceeds size limit", hiding the reason.

@dataclass(frozen=True)
class ModelEndpoint:
    """Where model calls go. `base_url` is always explicit: the openai client
    would otherwise read OPENAI_BASE_URL itself, and an empty one (as compose
    passes an unset variable) makes every call fail with "Connection error."."""

    base_url: str
    api_key: str


def _retry_after(response: Any) -> timedelta | None:
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date; let the backoff policy decide
        if seconds >= 0:
            return timedelta(seconds=min(seconds, 600.0))
    return None


def map_openai_error(
    exc: Exception, model: str, redactor: Redactor = NO_REDACTION, base_url: str = "the model API",
) -> ApplicationError:
    """Turn an openai exception into a retryable or non-retryable ApplicationError
    whose message names the endpoint (what a user must check first)."""
    redact = redactor.redact_text
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = redact(f"model API at {base_url} answered {status} for model {model!r}: {exc.message}")[:1000]
        if status in RETRYABLE_STATUS or status >= 500:
            return ApplicationError(detail, type=f"LlmHttp{status}", next_retry_delay=_retry_after(exc.response))
        hint = _HINTS.get(status, "retrying cannot fix this")
        return ApplicationError(f"{detail} ({hint})", type=REJECTED_ERROR_TYPE, non_retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        reason = f"{exc}" + (f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else "")
        return ApplicationError(
            redact(f"model API at {base_url} is unreachable for model {model!r}: {reason}; check OPENAI_BASE_URL "
                   "and that the server is running")[:1000],
            type="LlmUnavailable",
        )
    return ApplicationError(redact(f"model call failed: {type(exc).__name__}: {exc}")[:1000], type="LlmCallFailed")


def _previous_failure(details: Any) -> str | None:
    """Why the attempt before this one ended, when it said so in its last heartbeat."""
    for detail in details or ():
        if isinstance(detail, str) and detail.startswith("failed: "):
            return detail.removeprefix("failed: ")
    return None


def _attempts_left(info: Any) -> bool:
    policy = getattr(info, "retry_policy", None)
    maximum = getattr(policy, "maximum_attempts", 0) if policy is not None else 0
    return not maximum or info.attempt < maximum


def _counted_usage(prompt_tokens: int, message: dict[str, Any], model: str) -> dict[str, int]:
    """A streamed answer's usage when its provider sent none: the tokenizer's count (the prompt
    as fitted, the reply as a message)."""
    completion = max(0, count_message_tokens([message], model) - REPLY_PRIMING_TOKENS)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


class LlmActivities:
    def __init__(
        self, endpoint: ModelEndpoint, prices: PriceTable, transcripts: TranscriptStore, redactor: Redactor,
        outputs: OutputStore | None = None, checkpoints: CheckpointWriter | None = None,
        events: Publisher | None = None, stream: bool = True,
    ) -> None:
        self._endpoint = endpoint
        # Where the call's live events go (its start, the model's deltas, a retry): the worker's bus.
        self._events = events
        # Ask the provider to stream (the answer is returned whole all the same); off for an
        # endpoint that showed it cannot (`_no_stream`, said once per model).
        self._stream = stream
        self._no_stream: set[str] = set()
        self._checkpoints = checkpoints  # writes the step records a call carries
        self._prices = prices
        self._transcripts = transcripts
        self._outputs = outputs
        # Built by the worker with the key in use among its secrets.
        self._redact = redactor
        self._client: openai.AsyncOpenAI | None = None
        self._fitter = PromptFitter()

    def open_client(self) -> None:
        """Build the model client now, and the default tokenizer in the background; the worker
        does at start. The client's TLS context reads the system's CA bundle (30-40 ms on a
        loaded 2-core machine) and the tokenizer takes 0.5-0.6 s to build: the worker's first
        model call would otherwise wait for both (a fork's first step, or a run's)."""
        self._get_client()
        preload()

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self._endpoint.base_url,
                api_key=self._endpoint.api_key or "unset",
                max_retries=0,
            )
        return self._client

    @activity.defn(name=CALL_LLM)
    async def call_llm(self, request: LlmRequest) -> LlmResponse:
        # Heartbeat from the first instruction on, not only around the HTTP
        # call: loading a long transcript and fitting it to the context window
        # can take longer than the heartbeat timeout on a loaded machine, and
        # an attempt that never beats is timed out and retried for ever.
        events = CallEvents.of_activity(self._events, request.run_id, request.step,
                                        model_call_key(request.step, activity.info().activity_id))
        events.started("model.started", {"model": request.model, "label": request.label,
                                         "reason": _previous_failure(activity.info().heartbeat_details)})
        try:
            async with heartbeating():
                # The carried checkpoints are written beside the call, not before it.
                response, carried = await written_beside(
                    self._spanned_call(request, events), self._write_carried(request) if request.checkpoints else None)
                if carried is not None:
                    response.checkpoints = carried
                return response
        except ApplicationError as exc:
            if not exc.non_retryable and _attempts_left(activity.info()):
                # The next attempt says so too as it starts: one id, a reader gets one.
                events.retrying(activity.info().attempt + 1, str(exc.message)[:500])
                activity.heartbeat(f"failed: {str(exc.message)[:500]}")
            raise
        finally:
            events.ended()

    async def _spanned_call(self, request: LlmRequest, events: CallEvents) -> LlmResponse:
        with activity_span(names.model_span_name(request.model), self._span_attributes(request),
                           redact=self._redact.redact_text, client=True) as span:
            response = await self._call_llm(request, events)
            span.set({
                names.GEN_AI_INPUT_TOKENS: response.usage.prompt_tokens,
                names.GEN_AI_OUTPUT_TOKENS: response.usage.completion_tokens,
                names.GEN_AI_RESPONSE_ID: response.response_id,
                names.GEN_AI_FINISH_REASONS: [response.finish_reason] if response.finish_reason else None,
                names.COST_USD: response.cost_usd, names.PRICED: response.priced,
                names.CONTEXT_COMPRESSED: response.model_view is not None,
            })
            return response

    async def _write_carried(self, request: LlmRequest) -> CarriedWrite:
        if self._checkpoints is None:
            return CarriedWrite(error="this worker writes no checkpoints")
        return await self._checkpoints.save_carried(request.checkpoints)

    def _span_attributes(self, request: LlmRequest) -> dict[str, Any]:
        """The model call's span (activities/record/spans.py): the GenAI conventions' names, and Rewind's."""
        url = urlsplit(self._endpoint.base_url)
        return {
            names.GEN_AI_OPERATION: "chat", names.GEN_AI_PROVIDER: "openai", names.GEN_AI_MODEL: request.model,
            "server.address": url.hostname, "server.port": url.port,
            names.RUN_ID: request.run_id, names.STEP: request.step, names.ATTEMPT: activity.info().attempt,
        }

    async def _completion(self, body: dict[str, Any], options: dict[str, Any],
                          events: CallEvents) -> tuple[Any, bool]:
        """The completion, streamed from the provider when it can (each delta published as it
        comes, redacted), returned whole in the form an unstreamed call has; and whether it
        streamed."""
        model = str(body.get("model"))
        if not (self._stream and events.on and model not in self._no_stream):
            return await self._whole(body, options), False
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        try:
            stream = await self._get_client().post(
                "/chat/completions", body=streamed, cast_to=object, options=options,  # type: ignore[arg-type]
                stream=True, stream_cls=openai.AsyncStream[object])
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            # A provider (or model) that cannot stream names `stream` (or `stream_options`) in its 400.
            if "stream" not in str(exc.message).lower():
                raise
            self._cannot_stream(model, str(exc.message))
            return await self._whole(body, options), False
        try:
            kind = stream.response.headers.get("content-type", "")
            if "text/event-stream" not in kind:  # answered whole: a server that does not stream
                self._cannot_stream(model, f"it answered {kind or 'without a content type'}")
                return json.loads(await stream.response.aread()), False
            data = await assembled(stream, events, self._redact)
        finally:
            await stream.close()
        if not data["usage"]:
            # Counted by the tokenizer this once (_call_llm); the provider's own counts from now on.
            self._cannot_stream(model, "its streamed answers carry no usage")
        return data, True

    async def _whole(self, body: dict[str, Any], options: dict[str, Any]) -> Any:
        return await self._get_client().post("/chat/completions", body=body, cast_to=object,
                                             options=options)  # type: ignore[arg-type]

    def _cannot_stream(self, model: str, why: str) -> None:
        if model not in self._no_stream:
            self._no_stream.add(model)
            log.warning("the model API at %s does not stream for model %r (%s): this worker asks it for whole "
                        "answers from now on, and readers get each answer when it is complete",
                        self._endpoint.base_url, model, why[:200])

    async def _call_llm(self, request: LlmRequest, events: CallEvents) -> LlmResponse:
        try:
            base = (await self._transcripts.load(request.transcript_head, request.transcript_len)
                    if request.transcript else [])
            # Tool outputs stored by reference come back as the content of their messages.
            new_messages = (await self._outputs.resolve_messages(request.new_messages)
                            if self._outputs is not None else request.new_messages)
            # Stored before the call, so a store failure never wastes a paid call (a pipeline's
            # call is no conversation's turn: its messages are in its step record).
            head = (await self._transcripts.append(request.transcript_head, request.transcript_len, new_messages)
                    if request.transcript else None)
            if request.tools_ref is not None and not request.tools:
                tools, tools_ref = await self._transcripts.tools(request.tools_ref), request.tools_ref
            else:
                tools = request.tools
                tools_ref = await self._transcripts.put_tools(tools) if tools else None
        except (StoreUnavailableError, TranscriptError) as exc:
            raise ApplicationError(self._redact.redact_text(f"transcript store: {exc}")[:1000], type="TranscriptUnavailable") from None
        messages = [*base, *new_messages]
        sent = list(messages)
        model_view = None
        budget = self._fitter.budget(request.model, tools, tools_ref, request.context_tokens)
        # Counts only what is new since the conversation's last call on this worker, when it
        # can (activities/model/prompt_fit.py); a long count goes to a worker thread.
        fitted = await self._fitter.fit(
            sent, model=request.model, budget_tokens=budget, keep_last=request.keep_last,
            tool_result_chars=request.tool_result_chars, base_head=request.transcript_head if request.transcript else None,
            base_len=len(base), head=head,
        )
        if fitted.over_budget:
            # The recent messages alone do not fit (a huge fresh tool result):
            # as a last resort, recent tool results may be shortened too.
            fitted = await asyncio.to_thread(
                compress_messages, sent, model=request.model, budget_tokens=budget,
                keep_last=0, tool_result_chars=request.tool_result_chars,
            )
        if fitted.compressed:
            # The full history stays in the transcript and the checkpoints; the
            # actions say exactly what this call sent instead (rebuild_view).
            sent = fitted.messages
            model_view = {
                "budget_tokens": budget, "tokens_before": fitted.tokens_before,
                "tokens_after": fitted.tokens_after, "over_budget": fitted.over_budget,
                "actions": compact_actions(messages, fitted.actions),
            }
        problems = check_pairing(sent)
        if problems:
            # Every chat API refuses this with a 400 that retrying cannot fix: say why instead.
            raise ApplicationError(
                f"the conversation of step {request.step} breaks the chat API's tool-call pairing "
                f"({problems[0]}); it cannot be sent to any model",
                type=REJECTED_ERROR_TYPE, non_retryable=True,
            )
        kwargs: dict[str, Any] = {
            "model": request.model,
            # One request shape every common OpenAI-compatible server accepts
            # (OpenAI, vLLM, Ollama, llama.cpp): see activities/model/wire_format.py.
            "messages": outgoing_messages(sent),
        }
        if tools:
            kwargs["tools"] = tools
        for option in ("temperature", "seed", "response_format"):
            if getattr(request, option) is not None:
                kwargs[option] = getattr(request, option)
        # A pipeline call's label goes along as a header: servers ignore it, proxies and the
        # scripted model (which answers by label) read it.
        options = {"headers": {LABEL_HEADER: request.label}} if request.label else {}
        try:
            # The openai client's own `chat.completions.create` first walks every
            # message through its TypedDict transform: pure-Python work that grew
            # with the conversation (a third of a long run's CPU). The request is
            # plain JSON already, so it is posted as it is, through the same client
            # (auth, base URL, timeouts, the same APIStatusError on failure).
            data, streamed = await self._completion(kwargs, options, events)
            if not isinstance(data, dict):
                raise TypeError(f"the response is not a JSON object: {str(data)[:200]!r}")
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("choices[0].message is not an object")
            message = scrub_surrogates(message)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, request.model, self._redact, self._endpoint.base_url) from None
        except StreamBroken as exc:
            # Retried as a whole: the next attempt streams from the start again (its deltas carry
            # its attempt, so a reader never glues two attempts' text together).
            raise ApplicationError(
                self._redact.redact_text(f"model API at {self._endpoint.base_url} broke off its streamed answer "
                                         f"for model {request.model!r}: {exc}")[:1000],
                type="LlmStreamBroken",
            ) from None
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            # A garbled body is usually a proxy or provider hiccup: retry it.
            raise ApplicationError(
                self._redact.redact_text(f"model API returned a malformed completion for model {request.model!r}: {exc}")[:1000],
                type="LlmMalformedResponse",
            ) from None
        raw_usage = data.get("usage") or (_counted_usage(fitted.tokens_after, message, request.model) if streamed else {})
        usage = Usage(
            prompt_tokens=int(raw_usage.get("prompt_tokens") or 0),
            completion_tokens=int(raw_usage.get("completion_tokens") or 0),
            total_tokens=int(raw_usage.get("total_tokens") or 0),
        )
        cost, priced = self._prices.cost(request.model, usage)
        return LlmResponse(
            message=self._redact.redact_json(message),
            usage=usage,
            cost_usd=cost,
            priced=priced,
            finish_reason=choice.get("finish_reason"),
            response_id=data.get("id"),
            transcript_head=head,
            transcript_len=len(messages),
            # Only when this call stored them: a call that named them already knows the digest
            # (an echo would put 64 more bytes in history at every step).
            tools_ref=tools_ref if request.tools_ref is None else None,
            model_view=model_view,
            attempt=activity.info().attempt,
            note=(f"the scripted offline model has no script for model {request.model!r} and answered with its demo "
                  "agent's canned turns: start the run with --model script:NAME (a script of REWIND_SCRIPTS, or "
                  "`rewind dev --scripts`), or give the worker an OPENAI_API_KEY"
                  if data.get("system_fingerprint") == DEMO_TURNS_FINGERPRINT else None),
        )
