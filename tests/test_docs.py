"""The README and docs/ state what is true now, and check it here: every `python -m …` command they show runs with
--help and every `--flag` shown after it is in that --help; every subcommand and forward probe the CLIs dispatch is
named, and every probe file is dispatched; every environment variable's documented default is the code's, and every
variable the code reads is documented; the prefill chunk they quote is the code's; docs/architecture.md names the
Drafter's methods and every module of a room; no machine-local path and no history ("was an OverflowError") in
prose; every repository path they name is there; the README stays a page a newcomer finishes (≤ 300 lines, every
doc it lists linked). Each check also runs on a stale claim (the negative control) and must report it."""

from __future__ import annotations

import ast
import functools
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
# `python -m MODULE [SUB [SUBSUB]]`: the forward dispatcher hands its first argument to a probe
# (`python -m benchmarks forward levels --rounds 3`), so up to two words name the command
COMMAND = re.compile(r"python -m\s+([a-z][\w.]*)(?:[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?)?")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
# the code the environment variables are read in (tests included: SPECVIZ_SCREENSHOT)
CODE = [
    ROOT / "app.py",
    *(
        p
        for d in ("engine", "ui", "specviz", "benchmarks", "training", "tools", "tests")
        for p in sorted((ROOT / d).rglob("*.py"))
    ),
]


def texts() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES)


def page_texts() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in PAGES}


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in PATH.finditer(text) if not any(c in m.group(1) for c in "*<>{}")}


def exists(path: str) -> bool:
    p = ROOT / path
    return p.exists() or any(p.parent.glob(p.name + ".*")) or any(p.parent.glob(p.name + "-*"))


def test_every_path_the_docs_name_exists():
    """A path a doc names (a module, a result file, a test) is in the repository."""
    missing = sorted(p for p in named_paths(texts()) if not exists(p))
    assert not missing, missing
    assert not exists("engine/no_such_module.py")  # the negative control
    assert "engine/no_such_module.py" in named_paths("see engine/no_such_module.py.")


def test_the_readme_is_short_and_links_every_doc():
    """The README is a page a newcomer finishes and the way into every doc."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in readme, doc.name


# --- commands, their flags and subcommands ---------------------------------------------------------------------


SPAN = re.compile(r"`[^`\n]*(?:\n(?![ \t]*\n)[^`\n]*)*`")  # an inline code span, wrapped over lines or not


def unwrap(page: str) -> str:
    """The page with every inline code span outside fenced blocks on one line (prose wraps `python -m benchmarks
    specbench --drafts …` anywhere)."""
    parts = page.split("```")
    for i in range(0, len(parts), 2):
        parts[i] = SPAN.sub(lambda m: re.sub(r"[ \t]*\n[ \t]*", " ", m[0]), parts[i])
    return "```".join(parts)


def cli_pages(text: str | None = None) -> list[str]:
    return [unwrap(t) for t in ([p.read_text(encoding="utf-8") for p in PAGES] if text is None else [text])]


def command_of(m: re.Match) -> tuple[str, str]:
    return m.group(1), " ".join(w for w in m.group(2, 3) if w)


def commands(text: str | None = None) -> list[tuple[str, str]]:
    return sorted({command_of(m) for page in cli_pages(text) for m in COMMAND.finditer(page)})


def shown_flags(text: str | None = None) -> dict[tuple[str, str], set[str]]:
    """Per command, the --flags a page shows after it: inside an inline code span up to its closing backtick;
    elsewhere in a fenced block up to the line's end (and the lines a trailing backslash continues) or a `#`
    comment; in bare prose up to the line's end."""
    flags: dict[tuple[str, str], set[str]] = {}
    for page in cli_pages(text):
        for m in COMMAND.finditer(page):
            rest = page[m.end() :]
            line_start = page.rfind("\n", 0, m.start()) + 1
            if page.count("`", line_start, m.start()) % 2:  # inside an inline code span
                shown = rest.split("`", 1)[0]
            else:
                lines = [rest.split("\n", 1)[0]]
                fenced = page.count("```", 0, m.start()) % 2
                while fenced and lines[-1].rstrip().endswith("\\") and "\n" in rest:
                    rest = rest.split("\n", 1)[1]
                    lines.append(rest.split("\n", 1)[0])
                shown = " ".join(line.split(" #", 1)[0] for line in lines)
            flags.setdefault(command_of(m), set()).update(FLAG.findall(shown))
    return flags


@functools.cache
def help_of(module: str, sub: str) -> subprocess.CompletedProcess:
    """`python -m MODULE [SUB] --help`, run once per command and session (each imports torch: seconds apiece)."""
    args = [sys.executable, "-m", module, *sub.split(), "--help"]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def flags_missing_from_help(text: str | None = None) -> list[tuple[str, str, str]]:
    """(module, sub, flag) for each flag a page shows that its command's --help does not list."""
    missing = []
    for (module, sub), flags in sorted(shown_flags(text).items()):
        done = help_of(module, sub)
        missing += [
            (module, sub, flag)
            for flag in sorted(flags)
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", done.stdout + done.stderr)
        ]
    return missing


@pytest.mark.slow  # each imports torch: seconds apiece
@pytest.mark.parametrize("module,sub", commands())
def test_every_command_the_docs_show_runs_with_help(module, sub):
    """A command a doc shows exists: `--help` answers with exit code 0."""
    done = help_of(module, sub)
    assert done.returncode == 0, done.stderr[-500:]


@pytest.mark.slow
def test_a_command_that_does_not_exist_fails_the_check():
    """The negative control: a subcommand the CLI lacks does not pass --help."""
    done = help_of("engine", "nosuchcommand")
    assert done.returncode != 0 and ("engine", "nosuchcommand") not in commands()


@pytest.mark.slow
def test_every_flag_the_docs_show_is_in_its_commands_help():
    """Every `--flag` a doc shows after `python -m MODULE [SUB]` is in that command's --help; a flag the command
    lacks, shown in a synthetic line, is reported (the negative control)."""
    checked = sum(len(f) for f in shown_flags().values())
    assert checked >= 40, checked  # the README's and api.md's CLI blocks alone show more
    missing = flags_missing_from_help()
    assert not missing, missing
    stale = "```bash\npython -m engine generate --prompt TEXT --no-such-flag \\\n    --gamma 4 --another-one  # --x\n```"
    assert flags_missing_from_help(stale) == [
        ("engine", "generate", "--another-one"),
        ("engine", "generate", "--no-such-flag"),
    ]
    assert flags_missing_from_help("run `python -m engine kernels --refresh --fast`.") == [
        ("engine", "kernels", "--fast")
    ]


@pytest.mark.slow
def test_help_writes_nothing():
    """--help on the tour's recorder prints its usage and leaves the committed trace alone."""
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


def tree(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def dict_named(module: ast.Module, name: str) -> dict:
    node = next(
        n
        for n in module.body
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == [name]
    )
    return ast.literal_eval(node.value)


def dispatched() -> set[tuple[str, str]]:
    """Every (module, sub) the CLIs dispatch, read from their source: engine's subparsers, benchmarks' `argv[:1] ==
    ["sub"]` branches and its forward probes (FORWARD)."""
    subs = {
        ("engine", n.args[0].value)
        for n in ast.walk(tree("engine/__main__.py"))
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_parser"
    }
    bench = tree("benchmarks/__main__.py")
    for n in ast.walk(bench):
        if isinstance(n, ast.Compare) and isinstance(n.comparators[0], ast.List):
            subs |= {("benchmarks", e.value) for e in n.comparators[0].elts if isinstance(e, ast.Constant)}
    return subs | {("benchmarks", f"forward {k}") for k in dict_named(bench, "FORWARD")}


# `python -m benchmarks [race]` names race (the default); `forward {ops,gemm}` names each probe
NAMED = re.compile(r"python -m ([a-z][\w.]*) \[?([a-z][\w-]*)\]?")
LISTED = re.compile(r"python -m ([a-z][\w.]*) ([a-z][\w-]*) \{([\w,-]+)\}")


def named_commands(text: str | None = None) -> set[tuple[str, str]]:
    named = set(commands(text))
    for page in cli_pages(text):
        named |= {m.group(1, 2) for m in NAMED.finditer(page)}
        named |= {(m[1], f"{m[2]} {item}") for m in LISTED.finditer(page) for item in m[3].split(",")}
    return named


def test_every_subcommand_and_probe_is_named_in_a_doc():
    """`python -m engine kernels` printed the kernel plan while every doc named only `roofline` for it: each
    subcommand the CLIs dispatch (and each forward probe) is named in the README or docs/."""
    subs = dispatched()
    assert {("engine", "kernels"), ("benchmarks", "specbench"), ("benchmarks", "forward compile")} <= subs
    unnamed = sorted(subs - named_commands())
    assert not unnamed, unnamed
    stale = texts().replace("python -m engine kernels", "python -m engine roofline")
    assert sorted(subs - named_commands(stale)) == [("engine", "kernels")]  # the negative control


def undispatched_probes(forward: dict) -> list[str]:
    probes = {p.stem for p in (ROOT / "benchmarks" / "forward").glob("*.py") if p.stem != "__init__"}
    return sorted(probes - set(forward.values()))


def test_every_forward_probe_is_dispatched():
    """Every probe in benchmarks/forward/ runs as `python -m benchmarks forward NAME` (compile_cost was cited in the
    docs and missing from the dispatcher)."""
    forward = dict_named(tree("benchmarks/__main__.py"), "FORWARD")
    assert len(forward) >= 9 and not undispatched_probes(forward)
    assert undispatched_probes({k: v for k, v in forward.items() if v != "compile_cost"}) == ["compile_cost"]


# --- environment variables: read where, with what default, documented how -------------------------------------

COMPUTED = "(computed at run time)"  # a default no literal states (a path under the home folder)
READERS = {
    "get",
    "getenv",
    "setting",
}  # os.environ.get, env.get, os.getenv, fair_queue.setting(env, NAME, default)
VARIABLE = re.compile(r"SPECVIZ_[A-Z0-9_]+")


def constants(sources: dict[str, ast.Module]) -> dict[str, str]:
    """Module-level `NAME = literal` over the code, by name (a name bound to two values is left out)."""
    seen: dict[str, set[str]] = {}
    for module in sources.values():
        for n in module.body:
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                if isinstance(n.value, ast.Constant):
                    seen.setdefault(n.targets[0].id, set()).add(str(n.value.value))
    return {k: v.pop() for k, v in seen.items() if len(v) == 1}


def default_of(node: ast.AST | None, names: dict[str, str]) -> str | None:
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return names.get(node.id, COMPUTED)
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "str" and len(node.args) == 1:
        return default_of(node.args[0], names)
    return COMPUTED


def env_reads(sources: dict[str, str]) -> dict[str, set]:
    """SPECVIZ_* variable -> the defaults the code reads it with (None: no default), from the source's syntax:
    `*.get(NAME[, default])`, `getenv(NAME[, default])`, `setting(env, NAME, default, …)`, `os.environ[NAME]`."""
    parsed = {path: ast.parse(src) for path, src in sources.items()}
    names, reads = constants(parsed), {}
    for module in parsed.values():
        for n in ast.walk(module):
            if isinstance(n, ast.Call):
                reader = getattr(n.func, "attr", getattr(n.func, "id", ""))
                for k, arg in enumerate(n.args):
                    if (
                        reader in READERS
                        and isinstance(arg, ast.Constant)
                        and VARIABLE.fullmatch(str(arg.value))
                    ):
                        default = n.args[k + 1] if k + 1 < len(n.args) else None
                        reads.setdefault(arg.value, set()).add(default_of(default, names))
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                key = n.slice
                if isinstance(key, ast.Constant) and VARIABLE.fullmatch(str(key.value)):
                    if getattr(n.value, "attr", "") == "environ":
                        reads.setdefault(key.value, set()).add(None)
    return reads


@functools.cache
def code_env_reads() -> dict[str, set]:
    return env_reads({str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in CODE})


NUMBER = r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?"
# the ways the docs state a default: "`SPECVIZ_X` (180 s, …)", "(SPECVIZ_X, 2048)", "`SPECVIZ_X`, default 1",
# "`SPECVIZ_X` = 4", and limits.md's table rows "| `SPECVIZ_A`, `SPECVIZ_B` | 20, 32 |"
DEFAULT_FORMS = [
    re.compile(rf"`(SPECVIZ_\w+)` \(({NUMBER})(?=[ ),])"),
    re.compile(rf"\(`?(SPECVIZ_\w+)`?, ({NUMBER})\)"),
    re.compile(rf"`?(SPECVIZ_\w+)`?,? \(?default ({NUMBER}|empty|unset)\b"),
    re.compile(rf"`(SPECVIZ_\w+)` = ({NUMBER})\b"),
]
ROW = re.compile(r"^\|([^|]*)\|([^|]*)\|", re.M)
VALUE = re.compile(rf"(?:{NUMBER}|empty|unset)")


def table_defaults(text: str) -> tuple[set[str], list[tuple[str, str]]]:
    """(the variables named alone in a table row's first cell, their (name, default) where the second cell states
    one value per name)."""
    named, stated = set(), []
    for m in ROW.finditer(text):
        names = re.findall(r"`(SPECVIZ_\w+)`", m[1])
        if not names or re.sub(r"`SPECVIZ_\w+`|[,\s]", "", m[1]):
            continue
        named |= set(names)
        values = [v.strip() for v in re.split(r",\s+", m[2].strip())]
        if len(values) == len(names) and all(VALUE.fullmatch(v) for v in values):
            stated += zip(names, values)
    return named, stated


def documented_defaults(text: str) -> list[tuple[str, str]]:
    stated = [m.group(1, 2) for form in DEFAULT_FORMS for m in form.finditer(text)]
    return stated + table_defaults(text)[1]


def same(documented: str, code: str | None) -> bool:
    if documented in ("empty", "unset"):
        return code in ("", None)
    try:
        return code not in (None, COMPUTED) and float(documented.replace(",", "")) == float(code)
    except ValueError:
        return False


def wrong_defaults(text: str) -> list[tuple[str, str, list]]:
    """(variable, documented default, the code's defaults) wherever they differ (the code's: [] if it never reads
    the variable)."""
    reads = code_env_reads()
    return sorted(
        (name, value, sorted(map(str, reads.get(name, ()))))
        for name, value in documented_defaults(text)
        if not reads.get(name) or not all(same(value, d) for d in reads[name])
    )


def test_every_default_the_docs_state_is_the_codes():
    """A default a doc states for a SPECVIZ_* variable is the one the code reads it with; every variable of
    limits.md's table has its default parsed (so a row written another way fails here, not silently)."""
    stated = documented_defaults(texts())
    wrong = wrong_defaults(texts())
    assert not wrong, wrong
    limits = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    named, parsed = table_defaults(limits)
    assert len(named) >= 20 and named == {name for name, _ in parsed}, named ^ {name for name, _ in parsed}
    assert (
        len({name for name, _ in stated}) >= len(named) + 1
    )  # the table's and api.md's SPECVIZ_RACE_THREADS
    # the negative controls: a stale default in each form
    assert wrong_defaults("`SPECVIZ_MAX_RUN_S` (90 s, prefill included)") == [
        ("SPECVIZ_MAX_RUN_S", "90", ["180"])
    ]
    assert wrong_defaults("| `SPECVIZ_CLIENT_UPLOADS`, `SPECVIZ_CLIENT_UPLOAD_MB` | 20, 16 |") == [
        ("SPECVIZ_CLIENT_UPLOAD_MB", "16", ["32"])
    ]
    assert wrong_defaults("(`SPECVIZ_RACE_THREADS`, default 2)") == [("SPECVIZ_RACE_THREADS", "2", ["1"])]
    assert wrong_defaults("(SPECVIZ_MAX_PROMPT_TOKENS, 4,096)")[0][:2] == (
        "SPECVIZ_MAX_PROMPT_TOKENS",
        "4,096",
    )
    assert wrong_defaults("`SPECVIZ_NO_SUCH` = 4") == [("SPECVIZ_NO_SUCH", "4", [])]


def test_every_variable_the_code_reads_is_documented():
    """Every SPECVIZ_* variable the code reads is named in the README or docs/; the reader finds each way the code
    reads one (a variable read in a new way would be missed: the count fails first)."""
    reads, text = code_env_reads(), texts()
    assert len(reads) >= 28, sorted(reads)
    assert reads["SPECVIZ_HISTORY_TOKENS"] == {"16384"}  # through a constant: str(MAX_HISTORY_TOKENS)
    assert reads["SPECVIZ_QUEUE_SIZE"] == {"96"}  # through fair_queue.setting(env, NAME, default, low, high)
    assert reads["SPECVIZ_DEVICE_MEMORY_GB"] == {None}
    undocumented = sorted(name for name in reads if not re.search(rf"\b{name}\b", text))
    assert not undocumented, undocumented
    # the negative control: a variable read in each way and named nowhere
    code = (
        'import os\nA = os.environ.get("SPECVIZ_UNNAMED_A", "3")\nB = os.environ["SPECVIZ_UNNAMED_B"]\n'
        'C = setting(env, "SPECVIZ_UNNAMED_C", "1", 0, 9)\nos.environ["SPECVIZ_SET_NOT_READ"] = "0"\n'
    )
    found = env_reads({"x.py": code})
    assert found == {"SPECVIZ_UNNAMED_A": {"3"}, "SPECVIZ_UNNAMED_B": {None}, "SPECVIZ_UNNAMED_C": {"1"}}
    assert not any(re.search(rf"\b{name}\b", text) for name in found)


# --- numbers the docs quote from a constant; what architecture.md lists ---------------------------------------

CHUNK = re.compile(r"(\d+)-token (?:prefill )?chunks?\b")


def constant(path: str, name: str):
    return next(
        ast.literal_eval(n.value)
        for n in tree(path).body
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == [name]
    )


def test_the_prefill_chunk_the_docs_quote_is_the_codes():
    """api.md said 512-token prefill chunks while engine/decode/loop.py's PREFILL_CHUNK is 256."""
    chunk = constant("engine/decode/loop.py", "PREFILL_CHUNK")
    quoted = [int(m[1]) for m in CHUNK.finditer(texts())]
    assert len(quoted) >= 3 and set(quoted) == {chunk}, quoted  # api.md, architecture.md, limits.md
    assert [int(m[1]) for m in CHUNK.finditer("between 512-token prefill chunks")] == [512] != [chunk]


ARCHITECTURE = ROOT / "docs" / "architecture.md"
DRAFTER_LINE = re.compile(r"^\s+base\.py\s.*?\bDrafter \(([^)]*)\)", re.M | re.S)


def drafter_methods() -> set[str]:
    cls = next(
        n for n in tree("engine/drafters/base.py").body if isinstance(n, ast.ClassDef) and n.name == "Drafter"
    )
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def listed_methods(text: str) -> set[str]:
    """The methods architecture.md's layout lists for base.py's Drafter: `Drafter (propose / … / propose_beams)`."""
    m = DRAFTER_LINE.search(text)
    return {w for w in re.split(r"[\s/,]+", m[1]) if w} if m else set()


def test_the_drafter_methods_the_layout_lists_are_the_codes():
    """architecture.md's Drafter list lacked observe_verify: the methods it lists are Drafter's public methods."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    methods = drafter_methods()
    listed = listed_methods(text)
    assert len(methods) >= 3 and listed == methods, (
        f"docs/architecture.md's base.py line lists {sorted(listed)}; engine/drafters/base.py's Drafter has "
        f"{sorted(methods)}"
    )
    stale = (
        "    base.py               Draft and Drafter (propose / learn / observe / prepare / propose_beams)\n"
    )
    assert listed_methods(stale) == {"propose", "learn", "observe", "prepare", "propose_beams"} != methods


ROOMS = [
    "ui",
    "engine",
    *(f"engine/{d}" for d in ("runtime", "sampling", "heads", "drafters", "decode")),
    "training",
    "specviz",
]


def layout(text: str) -> str:
    """The annotated tree of architecture.md's Layout section (its fenced block)."""
    start = text.index("```\napp.py")
    return text[start : text.index("```", start + 3)]


def unlisted_modules(block: str) -> list[str]:
    words = set(re.findall(r"[\w.]+", block))
    return sorted(
        str(p.relative_to(ROOT))
        for room in ROOMS
        for p in (ROOT / room).glob("*.py")
        if p.name != "__init__.py" and p.name not in words
    )


def test_every_module_of_a_room_is_in_the_layout():
    """architecture.md's layout lacked training/datastore.py: every module of ui/, engine/'s rooms, training/ and
    specviz/ is named in it."""
    block = layout(ARCHITECTURE.read_text(encoding="utf-8"))
    unlisted = unlisted_modules(block)
    assert not unlisted, unlisted
    assert unlisted_modules(block.replace("datastore.py", "")) == [
        "training/datastore.py"
    ]  # the negative control


# --- prose: no machine-local path, no history --------------------------------------------------------------------

LOCAL = re.compile(r"(?<![\w.~$-])/(?:home|tmp|root|work|Users|mnt)/[^\s`)]*")
HISTORY = re.compile(
    r"\b(?:used to|was an|before this|fixed since|previously|until this change|it went to|it broke)\b", re.I
)
PENDING: set = set()  # a stale spot a doc's owner is still rewriting (the test fails once it has gone)


def findings(pages: dict[str, str], pattern: re.Pattern) -> set[tuple[str, str]]:
    return {(page, m[0].lower()) for page, text in pages.items() for m in pattern.finditer(text)}


def test_no_machine_local_path_in_the_docs():
    """docs/benchmarks.md named a wrapper under /work/bin that exists on one machine: no /home, /tmp, /root, /work,
    /Users or /mnt path in the README or docs/ (~/.cache/specviz, a home-relative path, is fine)."""
    found = findings(page_texts(), LOCAL)
    assert not found - PENDING, sorted(found - PENDING)
    assert not {p for p in PENDING if p[1].startswith("/")} - found, (
        "a pending stale spot is gone: drop its entry"
    )
    stale = {
        "docs/x.md": "run under `/work/bin/cpu-quiet` or /home/me/x (not ~/.cache/specviz nor $TMPDIR/a)"
    }
    assert findings(stale, LOCAL) == {("docs/x.md", "/work/bin/cpu-quiet"), ("docs/x.md", "/home/me/x")}


def test_no_history_in_the_docs():
    """The docs state what is true now; history ("was an OverflowError", "it went to the hub before", "fixed
    since") belongs in git log."""
    found = findings(page_texts(), HISTORY)
    assert not found - PENDING, sorted(found - PENDING)
    assert not {p for p in PENDING if not p[1].startswith("/")} - found, (
        "a pending stale spot is gone: drop its entry"
    )
    stale = {
        "docs/limits.md": '`temperature=10**400` | "temperature must be a finite number" (was an OverflowError) |',
        "README.md": "llama.cpp's figures skipped its prefill (a harness bug, fixed since).",
        "docs/api.md": "the target used to refuse it (it went to the hub before)",
    }
    assert findings(stale, HISTORY) == {
        ("docs/limits.md", "was an"),
        ("README.md", "fixed since"),
        ("docs/api.md", "used to"),
        ("docs/api.md", "it went to"),
    }


def quoted_blocks(page: str) -> list[str]:
    """The ```python blocks of a doc."""
    return re.findall(r"```python\n(.*?)\n```", (ROOT / page).read_text(encoding="utf-8"), re.S)


def test_the_round_and_the_contract_architecture_quotes_are_the_code():
    """docs/architecture.md quotes Engine._round and the drafter contract: each block is in its file verbatim, so
    a change to either that leaves the doc behind fails here (control: a block one line off is not found)."""
    blocks = quoted_blocks("docs/architecture.md")
    sources = {
        p: (ROOT / p).read_text(encoding="utf-8")
        for p in ("engine/decode/engine.py", "engine/drafters/base.py")
    }
    assert (
        len(blocks) >= 2
        and any("def _round(" in b for b in blocks)
        and any("class Settled" in b for b in blocks)
    )
    for block in blocks:
        assert any(block in text for text in sources.values()), block[:200]
    assert not any(blocks[0].replace("# 5. commit", "# 5. commit!") in text for text in sources.values())
