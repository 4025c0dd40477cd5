"""What wraps a report on its way to a file: a server-sent-events stream (`data: {...}` chunks, the last one that
carries a report is read), an envelope (`{"data": {...}}`, as llama-swap's captures write), and vLLM's
`LLM.get_metrics()` printed (`Counter(name=…, labels={…}, value=…)`, `Vector(…, values=[…])`: the dataclasses of
vllm/v1/metrics/reader.py), turned into the Prometheus text it was collected from. Plain Python, no torch.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize

from .checks import shown

SSE_LINE = re.compile(r"^data:\s?(.*)$", re.M)
ENVELOPE_NOTE = 'unwrapped from a {"data": …} envelope (as llama-swap\'s captures write)'
SSE_NOTE = "read from a server-sent-events stream: the last data: chunk that carries a report"
OBJECTS_NOTE = "read from LLM.get_metrics()'s printed objects (vllm/v1/metrics/reader.py: Counter, Vector)"
OBJECT_KINDS = ("Counter", "Vector", "Gauge", "Histogram")  # get_metrics()'s dataclasses
READ_OBJECTS = ("Counter", "Vector")  # the ones that hold spec-decode counts
MAX_OBJECTS = 10_000


def is_sse(text: str) -> bool:
    return bool(re.match(r"\s*(?:(?:event|id|retry):[^\n]*\n\s*)*data:", text))


def sse_chunks(text: str, where: str) -> list:
    """The JSON objects of a stream's data: lines, in order ([DONE] and empty lines skipped)."""
    chunks = []
    for payload in SSE_LINE.findall(text):
        payload = payload.strip()
        if not payload or payload == "[DONE]":
            continue
        try:
            chunks.append(json.loads(payload))
        except (ValueError, RecursionError):
            raise ValueError(f"{where}a data: chunk is not JSON: {shown(payload)}") from None
    if not chunks:
        raise ValueError(f"{where}no data: chunk holds JSON")
    return chunks


def unwrap(data, recognised) -> tuple:
    """A {"data": …} envelope opened (nested ones too) until `recognised(obj)` holds or nothing is left to open:
    (the object, notes)."""
    notes = ()
    while isinstance(data, dict) and "data" in data and not recognised(data) and len(notes) < 4:
        data, notes = data["data"], (ENVELOPE_NOTE,)
    return data, notes


def is_objects(text: str) -> bool:
    """get_metrics() printed: the text starts with one of its dataclasses (or a list of them)."""
    return bool(re.match(rf"\s*\[?\s*(?:{'|'.join(OBJECT_KINDS)})\(name=", text))


def _spans(text: str) -> list:
    """(start, end) character offsets of each top-level `Kind(...)` call in the text (strings kept whole)."""
    starts = [0]
    for line in io.StringIO(text):
        starts.append(starts[-1] + len(line))
    spans, depth, begin, at, last = [], 0, None, 0, None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            offset = starts[tok.start[0] - 1] + tok.start[1]
            if tok.type == tokenize.OP and tok.string in "([{":
                called = last is not None and last.type == tokenize.NAME and last.string in OBJECT_KINDS
                if begin is None and tok.string == "(" and called:
                    begin, at = starts[last.start[0] - 1] + last.start[1], depth
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
                if begin is not None and depth == at:
                    spans.append((begin, offset + 1))
                    begin = None
            if tok.type not in (
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.COMMENT,
                tokenize.INDENT,
                tokenize.DEDENT,
            ):
                last = tok
            if len(spans) > MAX_OBJECTS:
                raise ValueError(f"more than {MAX_OBJECTS:,} objects")
    except (tokenize.TokenError, IndentationError, SyntaxError) as e:
        raise ValueError(f"not Python's printed objects ({str(e)[:60]})") from None
    return spans


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: dict, value) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {value}"


def objects_text(text: str, where: str) -> str:
    """get_metrics()'s printed Counter and Vector objects as the Prometheus text they were collected from (a
    Vector is one counter per position); Gauge and Histogram objects are skipped. A ValueError names what is not
    one of them."""
    lines = []
    for begin, end in _spans(text):
        try:
            call = ast.parse(text[begin:end], mode="eval").body
            kind = call.func.id
            fields = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        except (SyntaxError, ValueError, AttributeError, RecursionError, MemoryError):
            raise ValueError(f"{where}not one of get_metrics()'s objects: {shown(text[begin:end])}") from None
        if kind not in READ_OBJECTS:
            continue
        name, labels = fields.get("name"), fields.get("labels", {})
        if not isinstance(name, str) or not isinstance(labels, dict):
            raise ValueError(f"{where}{kind}(…) needs name='…' and labels={{…}}: {shown(text[begin:end])}")
        if kind == "Counter":
            lines.append(_sample(name, labels, fields.get("value")))
        else:
            values = fields.get("values")
            if not isinstance(values, list):
                raise ValueError(f"{where}{name}: Vector(…) needs values=[…]")
            lines += [_sample(name, {**labels, "position": i}, v) for i, v in enumerate(values)]
    if not lines:
        raise ValueError(f"{where}no Counter or Vector object among get_metrics()'s printed objects")
    return "\n".join(lines)
