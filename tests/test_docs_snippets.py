"""Every shell and Python block of README.md and docs/*.md, as a user would paste it.

A block either runs here (the default), or the line right before it says why not:
  <!-- snippet: not run, REASON -->          (a Cloud account, docker, placeholders, a fragment)
  <!-- snippet: run by tests/FILE.py -->     (a test of its own runs it verbatim from the doc)
The unmarked blocks of one file run in order in one fresh empty folder, only environment
variables (the offline model, a Temporal port of the test's own); a `# name.py` first line
means "save this as name.py" (the next blocks use it), and the file is then run once as
`python name.py` so a typo in it fails here.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from as_user import BIN, empty_dir, user_env
from rewind.temporal.dev_server import free_port

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(bash|sh|console|python)\n(.*?)^```", re.M | re.S)
_MARKER = re.compile(r"<!-- snippet: (.*?) -->\s*\Z", re.S)


@dataclass(frozen=True)
class Snippet:
    doc: Path
    line: int
    language: str
    code: str
    marker: str | None  # None: runs here

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def _snippets(doc: Path) -> list[Snippet]:
    text = doc.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(Snippet(doc, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2),
                             marker.group(1).strip() if marker else None))
    return found


ALL = [s for doc in DOCS for s in _snippets(doc)]


def test_every_marked_block_says_why_it_is_not_run_here():
    assert ALL, "no shell or Python block found in the README or docs/"
    for snippet in ALL:
        if snippet.marker is None:
            continue
        if snippet.marker.startswith("run by "):
            test = REPO / snippet.marker.removeprefix("run by ").strip()
            assert test.is_file(), f"{snippet}: marker names {test.relative_to(REPO)}, which does not exist"
            assert snippet.doc.name in test.read_text(), \
                f"{snippet}: {test.relative_to(REPO)} does not read {snippet.doc.name}"
        else:
            reason = snippet.marker.removeprefix("not run").lstrip(" ,:")
            assert snippet.marker.startswith("not run") and len(reason) >= 10, \
                f"{snippet}: a marker is `<!-- snippet: not run, REASON -->` or `<!-- snippet: run by tests/F.py -->`," \
                f" got {snippet.marker!r}"


def _run(snippet: Snippet, folder: Path, env: dict[str, str]) -> None:
    code = snippet.code
    if snippet.language == "python":
        first = code.splitlines()[0]
        name = first.removeprefix("# ").strip() if re.fullmatch(r"# \w+\.py", first) else f"snippet_{snippet.line}.py"
        (folder / name).write_text(code)
        argv = [str(BIN / "python"), name]
    else:
        # One shell session per block; whatever the block left in the background (`rewind dev &`)
        # is stopped as a user's Ctrl-C of the shell would, and waited for.
        argv = ["bash", "-e", "-c", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + code]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (f"{snippet} exited {done.returncode} as pasted:\n{code}\n--- stdout\n"
                                  f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


RUN_HERE = sorted({s.doc for s in ALL if s.marker is None})


@pytest.mark.parametrize("doc", RUN_HERE, ids=[d.name for d in RUN_HERE])
def test_the_unmarked_blocks_run_as_pasted(doc, tmp_path):
    folder = empty_dir(tmp_path, doc.stem)
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", REWIND_SCRIPTED_LATENCY_MS="0")
    for snippet in _snippets(doc):
        if snippet.marker is None:
            _run(snippet, folder, env)
