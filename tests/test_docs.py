"""The README and docs/ point at things that exist: every `python -m …` command they show runs with --help, every
repository path they name is there (a results stem such as benchmarks/results/grounded counts when a file of it is), and
the README stays a page a newcomer finishes (≤ 300 lines, every doc it lists linked)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a path the docs name (not one after "REV:", a file in git history: `git show REV:benchmarks/x.py`)
PATH = re.compile(
    r"(?<![\w/.:-])((?:engine|benchmarks|assets|tests|ui|specviz|docs|tools|training)/[\w./-]*[\w/])"
)
COMMAND = re.compile(r"python -m ([a-z][\w.]*)(?: ([a-z][\w-]*))?")


def texts() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES)


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in PATH.finditer(text) if not any(c in m.group(1) for c in "*<>{}")}


def exists(path: str) -> bool:
    p = ROOT / path
    return p.exists() or any(p.parent.glob(p.name + ".*")) or any(p.parent.glob(p.name + "-*"))


def test_every_path_the_docs_name_exists():
    missing = sorted(p for p in named_paths(texts()) if not exists(p))
    assert not missing, missing
    assert not exists("engine/no_such_module.py")  # the negative control
    assert "engine/no_such_module.py" in named_paths("see engine/no_such_module.py.")


def test_the_readme_is_short_and_links_every_doc():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in readme, doc.name


def commands() -> list[tuple[str, str]]:
    return sorted({(m.group(1), m.group(2) or "") for m in COMMAND.finditer(texts())})


@pytest.mark.slow  # each imports torch: seconds apiece
@pytest.mark.parametrize("module,sub", commands())
def test_every_command_the_docs_show_runs_with_help(module, sub):
    args = [sys.executable, "-m", module, *([sub] if sub else []), "--help"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]


@pytest.mark.slow
def test_a_command_that_does_not_exist_fails_the_check():
    """The negative control: a subcommand the CLI lacks does not pass --help."""
    done = subprocess.run(
        [sys.executable, "-m", "engine", "nosuchcommand", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and ("engine", "nosuchcommand") not in commands()


@pytest.mark.slow
def test_help_writes_nothing():
    """--help on the tour's recorder prints its usage and leaves the committed trace alone (it used to record)."""
    trace = ROOT / "assets" / "tour-trace.json"
    before = trace.stat().st_mtime_ns
    done = subprocess.run(
        [sys.executable, "-m", "ui.make_tour", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "--out" in done.stdout and trace.stat().st_mtime_ns == before
