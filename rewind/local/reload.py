"""What `rewind dev` watches, and the changes it sees (with the `watchfiles` package).

The worker's code is its tool modules: for each module of `--tool-modules`, its top-level
package (every .py file in it, at any depth), or, for a module that is one file, the .py
files of its folder (the module and the helpers it imports from beside it, not the
folders below), plus the `--scripts` and `--mcp-config` files. A module not found yet
(`mytools.py` still to write) is watched for in the current folder. Nothing else: no
whole tree, no `__pycache__` (the worker writes there as it imports), no other suffix.

The module's file is found without importing it (importing runs the user's code, which
is the worker's job): `importlib.util.find_spec` of the top-level name, which finds
packages and modules without executing them, the current folder first, as the worker
looks (rewind/worker/main.py puts it first on sys.path).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from workflows.vocabulary.errors import ConfigError

# watchfiles groups changes: it yields once no change came for STEP_MS (an editor's
# save is several events), at the latest after DEBOUNCE_MS; one group is one restart.
DEBOUNCE_MS, STEP_MS = 1600, 300


def require_watchfiles() -> ModuleType:
    try:
        import watchfiles
    except ImportError:
        raise ConfigError("rewind dev restarts the worker when a file of its tools changes with the watchfiles "
                          "package, which is not installed here: pip install watchfiles (a dependency of "
                          "rewind-agents), or run rewind dev --no-reload") from None
    return watchfiles


@dataclass(frozen=True)
class WatchTargets:
    trees: tuple[Path, ...]    # package folders: their .py files, at any depth
    folders: tuple[Path, ...]  # a one-file module's folder: its .py files, that folder only
    files: tuple[Path, ...]    # single files: --scripts, --mcp-config
    shown: tuple[str, ...]     # what the banner names

    def accepts(self, path: Path) -> bool:
        if path in self.files:
            return True
        if path.suffix != ".py" or "__pycache__" in path.parts:
            return False
        return path.parent in self.folders or any(path.is_relative_to(tree) for tree in self.trees)

    def describe(self) -> str:
        return ", ".join(self.shown) or "nothing"


def watch_targets(modules: list[str], files: list[str | None], cwd: Path) -> WatchTargets:
    cwd = cwd.resolve()
    trees: list[Path] = []
    folders: list[Path] = []
    shown: list[str] = []
    for top in dict.fromkeys(m.split(".")[0] for m in modules if m):
        spec = _find(top, cwd)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:
            for location in locations:
                trees.append(Path(location).resolve())
                shown.append(f"{_shown(trees[-1], cwd)}/")
        elif spec is not None and spec.origin and spec.has_location and spec.origin.endswith(".py"):
            origin = Path(spec.origin).resolve()
            folders.append(origin.parent)
            shown.append(f"{_shown(origin, cwd)} (and the .py files beside it)")
        elif spec is None:  # not written yet, or misspelt: the worker says which
            folders.append(cwd)
            shown.append(f"{top}.py (not found yet; the .py files of this folder)")
        # a compiled or built-in module: nothing to edit
    singles = [Path(f).resolve() for f in files if f]
    shown += [_shown(f, cwd) for f in singles]
    return WatchTargets(tuple(dict.fromkeys(trees)), tuple(dict.fromkeys(folders)), tuple(singles), tuple(shown))


def _find(top: str, cwd: Path) -> importlib.machinery.ModuleSpec | None:
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, [str(cwd)])
        return spec if spec is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _shown(path: Path, cwd: Path) -> str:
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


class ChangeWatcher:
    """Watches `targets` from threads of its own until `stop()`; `take()` returns the
    changed files seen since the last call."""

    def __init__(self, targets: WatchTargets, out: TextIO) -> None:
        self._watchfiles = require_watchfiles()
        self.targets, self._out = targets, out
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changed: dict[Path, None] = {}
        flat = tuple(dict.fromkeys([*targets.folders, *(f.parent for f in targets.files)]))
        self._threads = [threading.Thread(target=self._watch, args=(paths, recursive), daemon=True)
                         for paths, recursive in ((targets.trees, True), (flat, False)) if paths]
        for thread in self._threads:
            thread.start()

    def take(self) -> list[Path]:
        with self._lock:
            changed, self._changed = list(self._changed), {}
        return changed

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2.0)

    def _accept(self, _change: Any, path: str) -> bool:
        return self.targets.accepts(Path(path))

    def _watch(self, paths: tuple[Path, ...], recursive: bool) -> None:
        try:
            for changes in self._watchfiles.watch(*paths, watch_filter=self._accept, recursive=recursive,
                                                  debounce=DEBOUNCE_MS, step=STEP_MS, stop_event=self._stop,
                                                  raise_interrupt=False):
                with self._lock:
                    self._changed.update((Path(path), None) for _, path in changes)
        except Exception as exc:  # a watched folder removed, the system's watch limit: say it, keep serving
            if not self._stop.is_set():
                print(f"rewind dev: watching {', '.join(map(str, paths))} stopped ({exc}); edits there no longer "
                      "restart the worker: restart rewind dev", file=self._out, flush=True)
