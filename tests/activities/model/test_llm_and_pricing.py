"""Error mapping of the model call and the price table."""

from __future__ import annotations

from datetime import timedelta

import openai
import pytest

from activities.model.llm import REJECTED_ERROR_TYPE, map_openai_error
from activities.model.pricing import PriceTable
from rewind.settings.config import Settings
from workflows.vocabulary.contracts import Usage
from workflows.vocabulary.errors import ConfigError


async def _error_from(model_server, status: int, retry_after: float | None = None) -> Exception:
    model_server.inject_fault(status, retry_after=retry_after)
    async with openai.AsyncOpenAI(base_url=model_server.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    return info.value


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_retryable_statuses(model, status):
    err = map_openai_error(await _error_from(model, status, retry_after=1.5), "gpt-4o-mini")
    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=1.5)


@pytest.mark.parametrize("status,hint", [(400, "malformed"), (401, "OPENAI_API_KEY"), (403, "access"), (404, "model name")])
async def test_unfixable_statuses_fail_at_once(model, status, hint):
    err = map_openai_error(await _error_from(model, status), "gpt-4o-mini")
    assert err.non_retryable and err.type == REJECTED_ERROR_TYPE
    assert str(status) in err.message and hint in err.message


async def test_connection_errors_are_retryable():
    async with openai.AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIConnectionError) as info:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert not map_openai_error(info.value, "m").non_retryable


def test_prices_match_longest_prefix_and_can_be_overridden(monkeypatch):
    table = PriceTable.parse(Settings.from_env().prices)
    cost, priced = table.cost("gpt-4o-mini-2024-07-18", Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000))
    assert priced and cost == pytest.approx(0.15 + 0.60)
    assert table.cost("some-local-model", Usage(prompt_tokens=10))[1] is False
    monkeypatch.setenv("REWIND_PRICES", '{"some-local-model": {"input": 1, "output": 2}}')
    cost, priced = PriceTable.parse(Settings.from_env().prices).cost("some-local-model", Usage(prompt_tokens=1_000_000, completion_tokens=500_000))
    assert priced and cost == pytest.approx(2.0)
    monkeypatch.setenv("REWIND_PRICES", '{"m": {"input": "cheap"}}')
    with pytest.raises(ConfigError, match="REWIND_PRICES"):
        PriceTable.parse(Settings.from_env().prices)
