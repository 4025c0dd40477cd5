"""A run recorded from another engine (engine/recorders: transformers' assisted generation, llama.cpp's draft model)
described as that engine ran it: its own cache mechanics, what its recorder could not observe, and the comparison
with plain decoding its recorder measured (never a race asked for that cannot run here). Events -> HTML; no torch.
"""

from __future__ import annotations

from engine.figures import plural, quotient_terms

from .markup import esc

# how each engine drops the rejected positions from its cache, and that the recorder only infers it
ROLLBACK = {
    "transformers": (
        "transformers crops its DynamicCache back to the kept positions (DynamicCache.crop): the cache's length "
        "went from {before} to {after}, {dropped} dropped. The recorder infers this from the kept count; it does not "
        "observe the cache."
    ),
    "llama.cpp": (
        "llama.cpp removes the sequence's KV cells past the kept positions (llama_kv_cache_seq_rm): from {before} to "
        "{after}, {dropped} dropped. The recorder infers this from the next draft call's input; it does not observe "
        "the cache."
    ),
}
GLOSSARY = {
    "transformers": (
        "the target cache already holds the rejected positions; transformers crops its DynamicCache back to the "
        "kept ones (the recorder infers this, it cannot observe it)."
    ),
    "llama.cpp": (
        "the target cache already holds the rejected positions; llama.cpp removes those KV cells from the "
        "sequence (the recorder infers this, it cannot observe it)."
    ),
}


def engine_of(run) -> dict:
    """RunStarted.engine of a run ({} for specviz's own run, or no run)."""
    started = getattr(run, "started", None)
    engine = getattr(started, "engine", None) if started is not None else None
    return engine if isinstance(engine, dict) else {}


def engine_family(run) -> str:
    """ "transformers", "llama.cpp", another engine's name, or "" for specviz's own run."""
    name = str(engine_of(run).get("name") or "")
    return "llama.cpp" if name.startswith("llama.cpp") else name


def rollback_line(run, rb) -> str:
    """The verify view's rollback sentence in the run's own engine's terms (its cache pointer for specviz's)."""
    n = len(rb.positions)
    dropped = f"{n} position{'s' if n != 1 else ''}"
    words = ROLLBACK.get(engine_family(run))
    if words is not None:
        return " Rollback: " + words.format(
            before=esc(rb.cache_before), after=esc(rb.cache_after), dropped=dropped
        )
    if engine_family(run):
        return f" Rollback: {esc(engine_family(run))} dropped {dropped} from its cache (not observed by the recorder)."
    return (
        f" Rollback: the target cache pointer moved back from {esc(rb.cache_before)} to {esc(rb.cache_after)} "
        f"({dropped} dropped, no copy)."
    )


def rollback_term(run, rollbacks: int, dropped: int) -> str:
    """The glossary's "rollback" for the run's engine, with its counts."""
    count = f"This run: {plural(rollbacks, 'rollback')}, {plural(dropped, 'position')} dropped."
    words = GLOSSARY.get(engine_family(run))
    if words is not None:
        return f"{words} {count}"
    if engine_family(run):
        return f"the rejected positions are dropped from {esc(engine_family(run))}'s cache (not observed). {count}"
    return (
        "the target cache already holds the rejected positions; moving its length pointer back drops them in "
        f"O(1). {count}"
    )


def plain_run(run) -> dict | None:
    """What the recorder measured of the same engine's plain decoding on the same prompt (Finished.summary["plain"],
    engine/recorders/trace.with_plain), when every figure is usable; None otherwise."""
    finished = getattr(run, "finished", None)
    plain = (getattr(finished, "summary", None) or {}).get("plain") if finished is not None else None
    if not isinstance(plain, dict):
        return None
    secs = [plain.get(k) for k in ("plain_s", "assisted_s")]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in secs):
        return None
    return plain


def measured_comparison(run) -> str:
    """The recorder's measured comparison, labelled with the engine: "transformers measured plain greedy decoding
    of the same prompt at 8.20 s and this assisted run at 6.85 s: 8.20 ÷ 6.85 = 1.20× (identical output)"; or
    that it measured none and that an imported run cannot be raced here. "" for specviz's own run."""
    name = engine_family(run)
    if not name:
        return ""
    plain = plain_run(run)
    if plain is None:
        return (
            f"The recorder measured no plain {esc(name)} decoding beside this run, and a run recorded from "
            f"{esc(name)} cannot be raced here: no measured speedup."
        )
    ratio, plain_s, assisted_s = quotient_terms(plain["plain_s"], plain["assisted_s"], least=2)
    same = plain.get("identical")
    output = " (identical output)" if same is True else " (the outputs differ)" if same is False else ""
    return (
        f"{esc(name)} measured by its recorder, on the same prompt: plain decoding {plain_s} s, this "
        f"speculative run {assisted_s} s, so {plain_s} ÷ {assisted_s} = {ratio}×{output}."
    )
