"""Experiments: `rewind experiment RUN ...` and `rewind experiment status|show|continue ID`."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from rewind.cli.commands.arguments import COUNT, SIDE_EFFECT_MODES, STEPS, USD
from rewind.cli.commands.common import EXIT_NOT_DONE, client_for, emit, open_checkpoints
from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import echo, validate_id

_EXPERIMENT_VERBS = ("status", "show", "continue")


def _experiment_summary(status: Any) -> str:
    from workflows.vocabulary.text import usd as dollars

    counts: dict[str, int] = {}
    for b in status.branches:
        counts[b.state] = counts.get(b.state, 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    budget = f", spent {dollars(status.spent_usd)} of {dollars(status.max_cost_usd)}" if status.max_cost_usd else ""
    line = (f"experiment {status.experiment_id} [{status.state}]: run {status.run_id} from step {status.step} of "
            f"{status.from_branch}, {len(status.branches)} branch(es): {states}{budget}")
    if status.state == "budget_exceeded":
        line += f"; raise it with `rewind experiment continue {status.experiment_id} --max-cost USD`"
    return line


async def cmd_experiment(args: argparse.Namespace, settings: Settings) -> int:
    from rewind import experiments as ex

    verb = args.target if args.target in _EXPERIMENT_VERBS else None
    if verb is None:
        if args.ident is not None:
            raise UsageError(f"rewind experiment RUN takes one run id; got {echo(args.ident, 30)} too "
                             f"(or did you mean one of: {', '.join(_EXPERIMENT_VERBS)} ID?)")
        return await _experiment_start(args, settings)
    if args.ident is None:
        raise UsageError(f"rewind experiment {verb} needs the experiment's id")
    validate_id("experiment", args.ident)
    client = await client_for(settings)
    if verb == "continue":
        if args.max_cost is None:
            raise UsageError("rewind experiment continue needs --max-cost USD (the new total budget)")
        status = await ex.continue_experiment(client, args.ident, args.max_cost)
        if args.wait:
            status = await ex.wait_for_experiment(client, args.ident)
        emit(status.model_dump(mode="json"), args.json, _experiment_summary(status))
        return 0 if not args.wait or status.state == "completed" else EXIT_NOT_DONE
    status = await ex.experiment_status(client, args.ident)
    if verb == "status":
        emit(status.model_dump(mode="json"), args.json, _experiment_summary(status))
        return 0
    from checkpoint_bridge.views.experiment_table import (
        experiment_table,
        table_markdown,
        table_text,
    )

    if args.score:
        status = await ex.score_experiment(client, settings, status, args.score)
    async with open_checkpoints(settings) as store:
        table = await experiment_table(store, status)
    text = table_markdown(table) if args.markdown else table_text(table)
    emit(table.model_dump(mode="json"), args.json, text)
    return 0


async def _experiment_start(args: argparse.Namespace, settings: Settings) -> int:
    from rewind import experiments as ex
    from workflows.vocabulary.experiments import ExperimentInput

    validate_id("run", args.target)
    if args.step is None:
        raise UsageError("rewind experiment RUN needs --step N (the checkpoint every variant forks from)")
    variants = [ex.parse_variant(v) for v in args.variant or []]
    inp = ExperimentInput(
        experiment_id=args.id or ex.new_experiment_id(), run_id=args.target, from_branch=args.from_branch,
        step=args.step, variants=variants, repeat=args.repeat, max_cost_usd=args.max_cost, max_steps=args.max_steps,
        concurrency=args.concurrency, scorer=args.score, side_effects=args.side_effects,
    )
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        await ex.start_experiment(client, settings, store, inp)
    if not args.wait:
        info = {"experiment_id": inp.experiment_id, "run_id": inp.run_id, "step": inp.step,
                "branches": len(variants) * inp.repeat}
        emit(info, args.json, f"experiment {inp.experiment_id} started: {len(variants)} variant(s) x {inp.repeat} "
              f"from step {inp.step} of {inp.run_id}; see `rewind experiment status {inp.experiment_id}`")
        return 0
    status = await ex.wait_for_experiment(client, inp.experiment_id)
    if args.json:
        emit(status.model_dump(mode="json"), True, "")
    else:
        from checkpoint_bridge.views.experiment_table import (
            experiment_table,
            table_text,
        )

        async with open_checkpoints(settings) as store:
            print(_experiment_summary(status))
            print(table_text(await experiment_table(store, status)))
    return 0 if status.state == "completed" else EXIT_NOT_DONE


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("experiment", "fork a checkpoint N ways x K repetitions and compare (also: status|show|continue ID)",
                handler=cmd_experiment)
    p.add_argument("target", metavar="RUN|status|show|continue", help="the run to experiment on, or what to do")
    p.add_argument("ident", nargs="?", metavar="ID", help="the experiment's id (with status, show, continue)")
    p.add_argument("--step", type=COUNT, help="the checkpoint every variant forks from")
    p.add_argument("--from-branch", default="main", help="the branch the --step checkpoint is on")
    p.add_argument("--variant", action="append", metavar="NAME:key=value,...",
                   help="model=M, system_prompt=TEXT or @file, tools=a+b, temperature=T, seed=S, a pipeline's "
                        "prompt.LABEL=TEXT or model.LABEL=M, or an agent variable; repeatable")
    p.add_argument("--repeat", type=STEPS, default=1, help="repetitions of each variant (default 1)")
    p.add_argument("--max-cost", type=USD, help="the whole experiment's budget in USD (continue: the new total)")
    p.add_argument("--max-steps", type=STEPS, help="each branch's step budget")
    p.add_argument("--concurrency", type=STEPS, help="branches running at once (default: all)")
    p.add_argument("--score", metavar="MODULE:FUNCTION", help="a scorer of each branch's final checkpoint")
    p.add_argument("--id", help="the experiment's id (default: a new one)")
    p.add_argument("--side-effects", choices=SIDE_EFFECT_MODES, default="dry-run",
                   help="what the branches' side-effecting tool calls do: dry-run (default: none runs; the tool's "
                        "dry_run answers, or a stub), reuse (a repeat of an earlier effect returns its result, a "
                        "new one runs) or run (as any run)")
    p.add_argument("--markdown", action="store_true", help="show: the table as Markdown")
    p.add_argument("--wait", action="store_true", help="wait until it completes or waits for a raised budget")
