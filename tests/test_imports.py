"""The layers import downwards only, the plain modules stay torch-free, and engine/ functions fit on a screen.

Layers, lowest first: the plain modules at engine/'s top (config, events, validate, metrics, costmodel, figures,
sizing, specs) ← runtime/ and sampling/ ← heads/ ← drafters/ ← decode/ ← engine's API (__init__, __main__).
A module may import its own room and any lower layer; training/ (top level) reads the engine's plain modules,
runtime and the heads' own modules, never a drafter, and the engine never imports training/; specviz reads only
the plain modules; app.py and ui/ sit on top of everything.
"""

from __future__ import annotations

import ast
import bisect
import io
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLAIN = (
    "config",
    "events",
    "validate",
    "metrics",
    "costmodel",
    "costrule",
    "figures",
    "sizing",
    "specs",
    "specbench",
    "serving",  # a plain room of its own: what serving engines report (engine/serving/)
    "validate_fields",
    "validate_started",
    "event_types",
)
RANK = {
    "plain": 0,
    "runtime": 1,
    "sampling": 1,
    "heads": 2,
    "drafters": 3,
    "decode": 4,
    "recorders": 5,
    "api": 5,
}
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    mods = {"app": ROOT / "app.py"}
    for pkg in ("engine", "specviz", "benchmarks", "ui", "training", "tools"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            mods[module_name(path)] = path
    return mods


def imports_of(name: str, path: Path, mods: dict) -> set[str]:
    """Project modules `name` imports anywhere in its file (top level or inside functions)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
            targets = subs if len(subs) == len(node.names) else [base] + subs  # `from pkg import mod` is mod
        else:
            continue
        found |= {t for t in targets if t in mods and t != name}
    return found


def room(name: str) -> str:
    """An engine module's room: plain, runtime, sampling, heads, drafters, decode or api."""
    parts = name.split(".")
    if parts == ["engine"] or parts[1:] == ["__main__"]:
        return "api"
    if len(parts) >= 2 and parts[1] in PLAIN:  # engine.serving.* too
        return "plain"
    assert len(parts) >= 2 and parts[1] in RANK, (
        f"{name} is in no room: add it to a layer in tests/test_imports.py"
    )
    return parts[1]


APP_BENCHMARKS = ("benchmarks.soak", "benchmarks.load_app", "benchmarks.classroom")
GRADIO_FREE = ("ui.app_views", "ui.app_guard", "ui.controls")  # the app's policy, importable without gradio


def allowed(name: str, dep: str) -> bool:
    """May module `name` import project module `dep`?"""
    top, dep_top = name.partition(".")[0], dep.partition(".")[0]
    if top in ("app", "ui"):
        return dep_top in ("engine", "specviz", "ui")
    if top == "benchmarks":  # the soak, the load test and the classroom drive the app: they read its choices
        return dep_top in ("engine", "specviz", "benchmarks") or (dep_top == "ui" and name in APP_BENCHMARKS)
    if top == "tools":  # developer tools sit on top, beside the app
        return dep_top in ("engine", "specviz", "benchmarks", "ui", "tools", "app")
    # the heads' training reads the engine's plain modules, runtime and the heads' modules
    if top == "training":
        return dep_top == "training" or (dep_top == "engine" and room(dep) in ("plain", "runtime", "heads"))
    if top == "specviz":
        return dep_top == "specviz" or (dep_top == "engine" and room(dep) == "plain")
    if dep_top != "engine":
        return False
    mine, theirs = room(name), room(dep)
    return mine == theirs or RANK[theirs] < RANK[mine]


def import_graph() -> dict[str, set[str]]:
    mods = project_modules()
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def test_imports_point_down_and_form_no_cycle():
    """Every import points to the importer's own room or a lower layer; no module reaches itself again through
    its imports (a cycle hidden by a function-local import included)."""
    graph = import_graph()
    for name, deps in graph.items():
        bad = sorted(d for d in deps if not allowed(name, d))
        assert not bad, (
            f"{name} imports {bad}: imports point down (plain <- runtime/sampling <- heads <- "
            f"drafters <- decode; specviz reads only the plain modules)"
        )
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if dep.rpartition(".")[0] == node or node.rpartition(".")[0] == dep:
                continue  # a package and its own modules (an __init__ re-exporting them) are one unit
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_the_layer_rules_refuse_an_upward_import():
    """Negative control: the rules refuse what they exist to refuse."""
    assert not allowed("engine.runtime.cache", "engine.decode.step")  # runtime below decode
    assert not allowed("engine.drafters.ngram", "engine.decode.engine")
    assert not allowed("training.train", "engine.drafters.auto")
    assert not allowed("engine.heads.modules", "training.train")  # the engine never imports its training
    assert not allowed("engine.decode.engine", "training.corpus")
    assert not allowed("engine.sampling.tree", "engine.runtime.cache")  # two rooms of one layer stay apart
    assert not allowed("specviz.tokens", "engine.runtime.models")
    assert not allowed("engine.config", "engine.runtime.models")
    assert allowed("engine.decode.step", "engine.sampling.tree") and allowed("ui.app_views", "engine.specs")


def test_engine_never_imports_ui_libraries():
    """engine/ knows tensors and models, never gradio or plotly; specviz never imports torch or gradio; the app's
    policy in ui/ (its choices, guards and controls) stays gradio- and torch-free, tested without a browser."""
    banned = {
        "engine": {"gradio", "plotly", "specviz", "benchmarks", "ui"},
        "specviz": {"torch", "gradio", "benchmarks", "ui"},
        **{m: {"gradio", "torch"} for m in GRADIO_FREE},
    }
    for name, path in project_modules().items():
        layer = name if name in GRADIO_FREE else name.partition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            roots = (
                [a.name.partition(".")[0] for a in node.names]
                if isinstance(node, ast.Import)
                else [(node.module or "").partition(".")[0]]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            hit = set(roots) & banned.get(layer, set())
            assert not hit, f"{name} imports {sorted(hit)}"


def test_plain_modules_and_the_renderers_leave_torch_out():
    """Importing the plain engine modules and every specviz module (app_views and sizing included) does not
    import torch: renderers, traces and the app's choices run without it."""
    plain = [f"engine.{m}" for m in PLAIN]
    views = [module_name(p) for p in sorted((ROOT / "specviz").rglob("*.py"))]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in plain + views)
        + "import ui.app_views as av\nimport ui.app_guard, ui.controls\nav.pair_choices(); av.drafter_choices()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"torch was imported: {out.stdout[:300]}"


@pytest.mark.slow  # a fresh interpreter imports torch
def test_the_torch_check_sees_torch(tmp_path):
    """Negative control: the same check reports torch when a module does import it."""
    code = "import sys\nimport engine.runtime.cache\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def logical_lines(source: str) -> set[int]:
    """The lines a statement or a comment starts on: a call the formatter wraps over ten lines is one line of
    meaning, as it was before the layout was ruff's."""
    starts, at_start, depth = set(), True, 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if tok.type == tokenize.NEWLINE or (tok.type == tokenize.NL and depth == 0):
            at_start = True
        elif tok.type == tokenize.COMMENT:
            starts.add(tok.start[0])
        elif at_start and tok.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
            starts.add(tok.start[0])
            at_start = False
    return starts


def long_functions(path: Path) -> list[str]:
    """Functions in a file with more than MAX_FUNCTION_LINES logical lines (statements and comments)."""
    source = path.read_text(encoding="utf-8")
    starts = sorted(logical_lines(source))
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = bisect.bisect_right(starts, n.end_lineno) - bisect.bisect_left(starts, n.lineno)
            if size > MAX_FUNCTION_LINES:
                out.append(f"{path.relative_to(ROOT)}:{n.lineno} {n.name} ({size} lines)")
    return out


def test_no_function_in_engine_is_longer_than_a_screen():
    """engine/'s functions fit on a screen (60 lines): a longer one reads as named private steps instead."""
    too_long = [f for path in sorted((ROOT / "engine").rglob("*.py")) for f in long_functions(path)]
    assert not too_long, too_long


def test_the_length_check_sees_a_long_function(tmp_path):
    """Negative control: a 61-line function is reported."""
    path = ROOT / "tests" / "_long_tmp.py"
    try:
        path.write_text("def f():\n" + "    x = 1\n" * 59 + "    return x\n")
        assert long_functions(path) and "f (61 lines)" in long_functions(path)[0]
        wrapped = "def f():\n" + "    x = g(\n        1,\n        2,\n    )\n" * 30 + "    return x\n"
        path.write_text(wrapped)  # 151 physical lines, 32 logical: one wrapped call is one line
        assert not long_functions(path)
    finally:
        path.unlink()


def test_the_cycle_check_sees_a_function_local_import(tmp_path):
    """Negative control: a function-local import back up the chain is found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from .b import x\n")
    b.write_text("def f():\n    from .a import y\n")
    mods = {"engine.a": a, "engine.b": b}
    assert imports_of("engine.a", a, mods) == {"engine.b"}
    assert imports_of("engine.b", b, mods) == {"engine.a"}
