"""What `rewind dev` watches: the tools' files and packages, never a whole tree; and the one
line when watchfiles is missing."""

from __future__ import annotations

import sys

import pytest

from rewind.local.reload import require_watchfiles, watch_targets
from workflows.vocabulary.errors import ConfigError


def test_a_module_file_its_folder_a_package_and_the_scripts(tmp_path):
    (tmp_path / "shop.py").write_text("")
    (tmp_path / "helpers.py").write_text("")
    (tmp_path / "sub").mkdir()
    pkg = tmp_path / "agents"
    (pkg / "deep").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (tmp_path / "scripts.json").write_text("{}")
    targets = watch_targets(["shop", "agents.deep.tools", "shop"], [str(tmp_path / "scripts.json"), None], tmp_path)

    assert targets.trees == (pkg,) and targets.folders == (tmp_path,)
    assert targets.describe() == "shop.py (and the .py files beside it), agents/, scripts.json"
    accepted = [tmp_path / "shop.py", tmp_path / "helpers.py", pkg / "deep" / "tools.py", tmp_path / "scripts.json"]
    refused = [tmp_path / "sub" / "other.py",                   # below a one-file module's folder
               tmp_path / "notes.txt", tmp_path / "other.json",  # not Python, not the scripts
               pkg / "__pycache__" / "x.py", pkg / "deep" / "tools.cpython-311.pyc"]  # what the worker writes
    assert [p for p in accepted if not targets.accepts(p)] == []
    assert [p for p in refused if targets.accepts(p)] == []


def test_a_module_not_written_yet_is_watched_for_in_this_folder(tmp_path):
    targets = watch_targets(["not_yet_here"], [], tmp_path)
    assert targets.folders == (tmp_path,) and targets.trees == ()
    assert targets.accepts(tmp_path / "not_yet_here.py")
    assert "not_yet_here.py (not found yet" in targets.describe()


def test_without_watchfiles_one_line_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # what `import watchfiles` meets when it is not installed
    with pytest.raises(ConfigError) as caught:
        require_watchfiles()
    assert "pip install watchfiles" in str(caught.value) and "--no-reload" in str(caught.value)
    assert "\n" not in str(caught.value)
