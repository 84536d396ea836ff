"""`rewind demo` streams: the model's text appears as the offline model writes it, a few
tokens at a time, between the progress lines (a subprocess in an empty folder, env only)."""

from __future__ import annotations

import asyncio

from as_user import BIN, empty_dir, user_env


async def test_the_demo_shows_the_model_writing(tmp_path):
    folder = empty_dir(tmp_path, "demo")
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "demo", cwd=folder, env=user_env(folder, REWIND_DEMO_FAILURE_RATE="0"),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    out = ""
    partial: set[int] = set()  # lengths at which the model's line was seen still being written
    while chunk := (await asyncio.wait_for(proc.stdout.read(4096), 180)).decode():
        out += chunk
        line = out.rsplit("\n", 1)[-1]
        if line.startswith("  model> "):
            partial.add(len(line))
    err = (await proc.stderr.read()).decode() if proc.stderr else ""
    assert await proc.wait() == 0, out + err
    progress, _, after = out.partition("\nfinished: completed")
    (written,) = [line.removeprefix("  model> ") for line in progress.splitlines() if line.startswith("  model> ")]
    answer = after.split("\nfinal answer:\n", 1)[1].split("\n", 1)[0]
    assert written == answer and written.startswith("Saved the report"), out
    assert len(partial) >= 2, f"the model's text came whole, not as it was written: {partial}\n{out}"
    assert "\n  step  1 | running " in progress  # the progress lines are still there
