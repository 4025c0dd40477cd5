"""Imports point down only (app -> specviz/benchmarks -> engine) and form no cycle, function-local ones included."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "specviz", "benchmarks")
ALLOWED = {"engine": {"engine"}, "specviz": {"engine", "specviz"}, "benchmarks": {"engine", "specviz", "benchmarks"},
           "app": {"engine", "specviz", "app"}}


def project_modules() -> dict[str, Path]:
    mods = {"app": ROOT / "app.py"}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            mods[pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"] = path
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
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in mods and t != name}
    return found


def test_imports_point_down_and_form_no_cycle():
    """engine imports nothing above it, specviz only engine, benchmarks engine and specviz; no module reaches
    itself again through its imports (a cycle hidden by a function-local import included)."""
    mods = project_modules()
    graph = {name: imports_of(name, path, mods) for name, path in mods.items()}
    for name, deps in graph.items():
        layer = name.partition(".")[0]
        bad = {d for d in deps if d.partition(".")[0] not in ALLOWED[layer]}
        assert not bad, f"{name} imports {sorted(bad)}: imports must point down (app -> specviz/benchmarks -> engine)"
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if dep.rpartition(".")[0] == node or node.rpartition(".")[0] == dep:
                continue  # a package and its own modules (the lazy engine/__init__ map) are one unit
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_engine_never_imports_ui_libraries():
    """engine/ knows tensors and models, never gradio or plotly; specviz never imports torch or gradio."""
    banned = {"engine": {"gradio", "plotly", "specviz", "benchmarks"}, "specviz": {"torch", "gradio", "benchmarks"}}
    for name, path in project_modules().items():
        layer = name.partition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            roots = ([a.name.partition(".")[0] for a in node.names] if isinstance(node, ast.Import) else
                     [(node.module or "").partition(".")[0]] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            hit = set(roots) & banned.get(layer, set())
            assert not hit, f"{name} imports {sorted(hit)}"


def test_the_cycle_check_sees_a_function_local_import(tmp_path):
    """Negative control: a function-local import back up the chain is found (what drafters/adaptive/ngram had)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from .b import x\n")
    b.write_text("def f():\n    from .a import y\n")
    mods = {"engine.a": a, "engine.b": b}
    assert imports_of("engine.a", a, mods) == {"engine.b"}
    assert imports_of("engine.b", b, mods) == {"engine.a"}
