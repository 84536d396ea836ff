"""`--side-effects run|reuse|dry-run` as a user meets it: a shop whose side-effecting
tools count their executions in files; a dry-run fork and an experiment (dry-run by
default) place no order, and the checkpoint, `show` and `diff` say so."""

from __future__ import annotations

import json
from pathlib import Path

from as_user import UserWorker, one_line_error, rewind, rewind_json
from helpers import scripted

SHOP = '''
from rewind import tool

ORDERS = {orders!r}
MAILS = {mails!r}


def count(path, line):
    with open(path, "a") as f:
        f.write(line + "\\n")


@tool
async def lookup_price(item: str) -> str:
    """The price of one item."""
    return f"{{item}}: 12.50 EUR"


@tool(side_effects=True)
async def place_order(item: str) -> str:
    """Place an order: a real one, counted in ORDERS."""
    count(ORDERS, item)
    return f"ordered {{item}}"


async def preview_mail(to: str) -> str:
    return f"would mail {{to}}"


@tool(side_effects=True, dry_run=preview_mail)
async def send_mail(to: str) -> str:
    """Send a confirmation mail, counted in MAILS."""
    count(MAILS, to)
    return f"mailed {{to}}"
'''

TURNS = [
    {"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}}]},
    {"tool_calls": [{"name": "place_order", "arguments": {"item": "tea"}},
                    {"name": "send_mail", "arguments": {"to": "ann@example.com"}}]},
    {"content": "Ordered tea and mailed Ann."},
]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def shop_run(world, tmp_path: Path):
    folder = world.folder("shop")
    orders, mails = tmp_path / "orders.txt", tmp_path / "mails.txt"
    (folder / "shop.py").write_text(SHOP.format(orders=str(orders), mails=str(mails)))
    return folder, orders, mails


async def test_dry_run_fork_places_no_order_and_says_so(world, tmp_path):
    folder, orders, mails = await shop_run(world, tmp_path)
    env = world.env(folder)
    model = scripted(world.model, TURNS)
    with UserWorker(folder, env, "--tool-modules", "shop") as worker:
        await worker.wait_ready()
        cli = world.folder("cli")
        env = world.env(cli)
        run = await rewind_json(cli, env, "start", "--task", "buy tea", "--model", model, "--run-id", "fx-shop-1", "--wait")
        assert run["status"]["state"] == "completed", run
        assert (lines(orders), lines(mails)) == (1, 1)

        # Exploring a new prompt from before the order: no order, no mail.
        forked = await rewind_json(cli, env, "fork", "fx-shop-1", "--step", "1", "--branch", "dry", "--system-prompt",
                                   "Be brief.", "--side-effects", "dry-run", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert (lines(orders), lines(mails)) == (1, 1), worker.log()

        head = await rewind_json(cli, env, "show", "fx-shop-1:dry:3")
        records = {r["tool_name"]: r for r in head["tool_call_cache"]}
        assert records["place_order"]["dry_run"] is True
        assert records["place_order"]["tool_output"].startswith("[dry run] not executed: place_order")
        assert records["send_mail"]["dry_run"] is True and records["send_mail"]["tool_output"] == "would mail ann@example.com"
        assert "dry_run" not in records["lookup_price"]
        code, text, err = await rewind(cli, env, "show", "fx-shop-1:dry:3")
        assert code == 0 and "dry run    place_order call" in text, err + text

        code, text, err = await rewind(cli, {**env, "COLUMNS": "120"}, "diff", "fx-shop-1", "main", "dry")
        assert code == 0, err
        assert "place_order(item=\"tea\") [dry run]" in text, text
        assert "0 run, 0 cached, 0 failed, 2 dry run" in text, text
        diff = await rewind_json(cli, env, "diff", "fx-shop-1", "main", "dry")
        assert diff["b"]["tool_calls_dry_run"] == 2 and diff["a"]["tool_calls_dry_run"] == 0

        # A fork of the dry-run branch is a real one again unless told (forks run effects by default),
        # and a dry run is no effect of its lineage: it runs now.
        again = await rewind_json(cli, env, "fork", "fx-shop-1", "--from-branch", "dry", "--step", "2",
                                  "--branch", "real", "--wait")
        assert again["status"]["state"] == "completed", again
        assert (lines(orders), lines(mails)) == (1, 1)  # step 2 of dry already answered the calls

        # The step's ledger counts the calls it answered without their effect.
        step2 = await rewind_json(cli, env, "show", "fx-shop-1:dry:2")
        assert step2["ledger"]["step"]["dry_run_calls"] == 2, step2["ledger"]
        assert step2["ledger"]["step"]["tool_calls"] == 1  # send_mail's dry_run ran; place_order's stub did not

        # A plain fork from before the order runs it again, as it always has.
        plain = await rewind_json(cli, env, "fork", "fx-shop-1", "--step", "1", "--branch", "plain", "--wait")
        assert plain["status"]["state"] == "completed", plain
        assert (lines(orders), lines(mails)) == (2, 2)

        # A rollback that asks again for the effects its undone step caused reuses them, and
        # the step counts them as calls (reused), not as nothing.
        code, out, err = await rewind(cli, env, "rollback", "fx-shop-1", "--step", "1", "--wait")
        assert code == 0, out + err
        assert (lines(orders), lines(mails)) == (2, 2)
        tree = await rewind_json(cli, env, "tree", "fx-shop-1")
        redone = next(row for row in tree["branches"]["main.r1"] if row["step_index"] == 2)
        shown = await rewind_json(cli, env, "show", redone["checkpoint_id"])
        assert shown["ledger"]["step"]["reused_calls"] == 2 and shown["ledger"]["step"]["tool_calls"] == 0


async def test_an_experiment_is_dry_run_by_default(world, tmp_path):
    folder, orders, mails = await shop_run(world, tmp_path)
    env = world.env(folder)
    model = scripted(world.model, TURNS)
    with UserWorker(folder, env, "--tool-modules", "shop") as worker:
        await worker.wait_ready()
        cli = world.folder("cli")
        env = world.env(cli)
        run = await rewind_json(cli, env, "start", "--task", "buy tea", "--model", model, "--run-id", "shop-2", "--wait")
        assert run["status"]["state"] == "completed", run
        status = await rewind_json(cli, env, "experiment", "shop-2", "--step", "1", "--variant", "terse:system_prompt=Terse.",
                                   "--variant", "warm:system_prompt=Warm.", "--repeat", "2", "--wait")
        assert status["state"] == "completed", status
        assert len(status["branches"]) == 4
        assert (lines(orders), lines(mails)) == (1, 1), worker.log()
        # Asked for, the experiment's branches run their effects.
        status = await rewind_json(cli, env, "experiment", "shop-2", "--step", "1", "--variant", "real:system_prompt=Real.",
                                   "--side-effects", "run", "--wait")
        assert status["state"] == "completed", status
        assert (lines(orders), lines(mails)) == (2, 2)


async def test_two_long_answers_show_their_difference_at_80_columns(world, tmp_path):
    """Two final answers that share a long beginning: `rewind diff` in an 80-column
    terminal shows the part where they differ, not the shared start cut off."""
    folder, orders, mails = await shop_run(world, tmp_path)
    shared = " ".join(f"Finding {i}: the price held and stock was fine." for i in range(10))
    env = world.env(folder)
    with UserWorker(folder, env, "--tool-modules", "shop") as worker:
        await worker.wait_ready()
        cli = world.folder("cli")
        env = world.env(cli)
        first = scripted(world.model, [TURNS[0], {"content": shared + " Verdict: order the green tea."}])
        run = await rewind_json(cli, env, "start", "--task", "tea?", "--model", first, "--run-id", "shop-3", "--wait")
        assert run["status"]["state"] == "completed", run
        # The script's turn is counted from the conversation: the fork's first call is turn 2.
        second = scripted(world.model, [TURNS[0], {"content": shared + " Verdict: wait for the black tea."}])
        forked = await rewind_json(cli, env, "fork", "shop-3", "--step", "1", "--branch", "other", "--model", second,
                                   "--wait")
        assert forked["status"]["state"] == "completed", forked
        code, text, err = await rewind(cli, {**env, "COLUMNS": "80"}, "diff", "shop-3", "main", "other")
        assert code == 0, err
        assert max(map(len, text.splitlines())) <= 80, text
        assert "green tea" in text and "black tea" in text, text


async def test_a_bad_side_effects_value_is_one_line(world, tmp_path):
    cli = world.folder("cli")
    code, out, err = await rewind(cli, world.env(cli), "fork", "r", "--step", "1", "--branch", "b",
                                  "--side-effects", "maybe")
    one_line_error(code, err, "--side-effects", "invalid choice", "dry-run")


def test_dry_run_is_declared_on_side_effecting_async_tools_only():
    import pytest

    from activities.tools.registry import tool
    from workflows.vocabulary.errors import ToolRegistryError

    async def preview(x: str) -> str:
        return x

    with pytest.raises(ToolRegistryError, match="declare side_effects=True"):
        @tool(dry_run=preview)
        async def read(x: str) -> str:
            return x

    def sync_preview(x: str) -> str:
        return x

    with pytest.raises(ToolRegistryError, match="dry_run must be an async function"):
        @tool(side_effects=True, dry_run=sync_preview)
        async def write(x: str) -> str:
            return x

    @tool(side_effects=True, dry_run=preview)
    async def send(x: str) -> str:
        return x

    assert send.spec.dry_run is True and send.dry_run is preview


def test_the_cli_knows_the_workflow_modes():
    from rewind.cli.commands.arguments import SIDE_EFFECT_MODES as cli
    from workflows.vocabulary.contracts import SIDE_EFFECT_MODES as contracts

    assert cli == contracts
    assert json.loads(json.dumps(cli)) == ["run", "reuse", "dry-run"]
