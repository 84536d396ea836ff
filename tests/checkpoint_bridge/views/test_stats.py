"""`store_stats` on every backend: sums of the branches' own steps, a fork's inherited
steps never counted twice, invalidated steps still paid for, step times within a
branch, retries from tool records and ledgers; a run that is not there is an error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from checkpoint_factory import first_step, next_step

from checkpoint_bridge.views.stats import store_stats, stats_text
from workflows.vocabulary.errors import RunNotFoundError


def _ledger(prompt: int, completion: int, cost: float, **extra: int) -> dict:
    step = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "cost_usd": cost, "model_calls": 1, "tool_calls": 1, "cache_hits": 0, **extra}
    return {"step": step, "branch": step, "total": step}


def _step(parent, seconds: float, *, branch_id=None, ledger=None, attempts=1, label=None, model="gpt-4o-mini", **fields):
    cp = next_step(parent, branch_id=branch_id, model=model,
                   created_at=parent.created_at + timedelta(seconds=seconds),
                   ledger=ledger or _ledger(100, 20, 0.001), **fields)
    if attempts > 1:
        cp.tool_call_cache[-1].attempts = attempts
    if label:
        cp.step_label = label
    return cp


async def _save(store, *cps) -> None:
    for cp in cps:
        await store.save(cp)


async def test_stats_add_up_own_steps_of_every_branch(store) -> None:
    # run a: main 0..3 (completed), a fork "alt" from step 1 with another model (2 steps),
    # a rollback of main to step 2 (step 3 invalidated, continued as main.r1 with step 3).
    a0 = first_step("a")
    a1 = _step(a0, 2.0)
    a2 = _step(a1, 4.0, ledger=_ledger(100, 20, 0.001, model_retries=1), attempts=3)
    a3 = _step(a2, 6.0, label="final answer")
    alt2 = _step(a1, 30.0, branch_id="alt", model="big-model", ledger=_ledger(1000, 200, 0.05))
    alt3 = _step(alt2, 8.0, branch_id="alt", model="big-model", ledger=_ledger(1000, 200, 0.05, cache_hits=1))
    await _save(store, a0, a1, a2, a3, alt2, alt3)
    await store.invalidate_after("a", "main", 2, "rolled back")
    r3 = _step(a2, 50.0, branch_id="main.r1", label="final answer")
    await store.save(r3)
    # run b: failed at step 1.
    b0 = first_step("b")
    b1 = _step(b0, 1.0, status="failed", error_info={"reason": "boom"})
    await _save(store, b0, b1)

    stats = await store_stats(store)
    assert (stats.runs, stats.branches) == (2, 4)
    assert stats.runs_by_state == {"completed": 1, "failed": 1}
    t = stats.totals
    # Own steps: a main 1,2,3 + alt 2,3 + main.r1 3 + b 1 = 7 (the invalidated a:main:3 was paid for).
    assert t.steps == 7
    assert t.prompt_tokens == 5 * 100 + 2 * 1000 and t.completion_tokens == 5 * 20 + 2 * 200
    assert t.cost_usd == pytest.approx(5 * 0.001 + 2 * 0.05)
    assert stats.by_model["big-model"].steps == 2 and stats.by_model["big-model"].branches == 1
    assert stats.by_model["gpt-4o-mini"].steps == 5 and stats.by_model["gpt-4o-mini"].branches == 3
    # By branch name: main and its revision fold together.
    assert set(stats.by_branch) == {"main", "alt"}
    assert stats.by_branch["main"].steps == 5 and stats.by_branch["main"].branches == 3  # a/main, a/main.r1, b/main
    assert (stats.tool_calls, stats.cache_hits) == (7, 1)
    assert stats.cache_hit_rate == pytest.approx(1 / 8)
    assert stats.retries == {"call_llm": 1, "run_tool web_search": 2}
    # Step times within a branch only (a fork's or revision's first step waits on a person, not counted):
    # a main 2, 4, 6; alt 8; b 1 -> 5 steps.
    assert stats.step_time.steps == 5
    assert stats.step_time.mean_ms == pytest.approx((2 + 4 + 6 + 8 + 1) / 5 * 1000)
    assert stats.step_time.p95_ms == pytest.approx(8000)

    text = stats_text(stats)
    assert "2 run(s), 4 branch(es), 7 step(s)" in text and "1 completed, 1 failed" in text
    assert "big-model" in text and "call_llm 1, run_tool web_search 2" in text

    only_b = await store_stats(store, ["b"])
    assert (only_b.runs, only_b.totals.steps, only_b.runs_by_state) == (1, 1, {"failed": 1})


async def test_stats_of_an_empty_store_and_of_an_unknown_run(store) -> None:
    empty = await store_stats(store)
    assert empty.runs == 0 and empty.cache_hit_rate is None and empty.step_time.mean_ms is None
    assert stats_text(empty).startswith("no runs in ")
    with pytest.raises(RunNotFoundError, match="no checkpoints for run 'ghost'"):
        await store_stats(store, ["ghost"])


async def test_a_pipeline_run_that_gave_its_result_is_completed(store) -> None:
    # A pipeline's last step is its "result"; one of its calls may be labelled "result" too, and
    # then names the call (`pipeline`): that run has not finished.
    done0, running0 = first_step("done"), first_step("running")
    done1 = _step(done0, 1.0, label="result")
    running1 = _step(running0, 1.0, label="result", pipeline={"pipeline": "report", "position": 0, "label": "result",
                                                                  "kind": "llm", "digest": "0" * 64})
    await _save(store, done0, done1, running0, running1)
    assert (await store_stats(store)).runs_by_state == {"completed": 1, "unfinished": 1}
