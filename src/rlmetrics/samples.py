"""Sample rows (prompt, completion, reward, any other column) as plain, bounded values: what
``Logger.log_samples`` hands the backends.

A training loop logs a few of its rollouts every so often to look at them: the completions a
reward function liked and the ones it did not. Completions can be long (a runaway generation is
megabytes) and a loop may hand over thousands of rows, so the rows are bounded here, on the
caller's thread, before any backend sees them: at most ``max_rows`` rows per call and
``max_cell_bytes`` bytes of UTF-8 per text cell, each cut said once. Values become JSON values
(text, numbers, bools, None; anything else its ``str()``), so a backend writing later on its
own thread gets the rows as they were at the call. A cell no tracker can store (text with a
lone surrogate, an int too long to print: :mod:`rlmetrics.storable`) is replaced alone, said
once; a column whose name names a secret holds ``"<redacted>"`` (:mod:`rlmetrics.redaction`),
and so does a value under such a key inside a cell's dict or list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._warn import describe_value, warn_once
from .flatten import key_text
from .redaction import DEFAULT_REDACTION, REDACTED, Redaction
from .storable import printable_int, utf8_text
from .values import as_plain, first_elements, readable_items

__all__ = [
    "FIRST_COLUMNS",
    "MAX_CELL_BYTES",
    "MAX_SAMPLE_COLUMNS",
    "MAX_SAMPLE_ROWS",
    "columns_of",
    "cut_text",
    "markdown_table",
    "to_samples",
]

#: Rows one ``log_samples`` call may hand the backends; the rest are dropped, said once.
MAX_SAMPLE_ROWS = 256
#: UTF-8 bytes one text cell may hold; longer text is cut, said once.
MAX_CELL_BYTES = 32_768
#: Columns one row may have.
MAX_SAMPLE_COLUMNS = 64
#: The columns shown first, in this order, when a row has them.
FIRST_COLUMNS = ("prompt", "completion", "reward")

_PLAIN = (bool, int, float, type(None))


def cut_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` bytes of UTF-8 (cut on a character boundary), and whether
    it was cut. Costs O(max_bytes) whatever the length of ``text``."""
    if len(text) * 4 <= max_bytes:
        return text, False  # even four bytes a character fits
    head = text[: max_bytes + 1].encode("utf-8", "surrogatepass")
    if len(head) <= max_bytes:
        return text, False
    return head[:max_bytes].decode("utf-8", "ignore"), True


def _head(value: Any, max_bytes: int) -> Any:
    """A long sequence or array (a tensor of per-token logprobs) as its first elements, as many
    as a cell cut to ``max_bytes`` can show: each element's text takes at least 3 bytes with
    its ``", "``, so the text of the first ``max_bytes // 3 + 2`` begins as the whole one's
    and is cut at the same byte."""
    return first_elements(value, max_bytes // 3 + 2)


#: How deep a cell's dicts and lists are searched for keys that name a secret.
_MAX_DEPTH = 32
#: What stands for a container met again on its own path (str() prints a cycle so too), or
#: for what lies past the entries the cell's text can show.
_ELIDED = "..."


class _WithoutSecrets:
    """A cell's dict or list (an agent's environment settings, its tool calls) with every
    value under a nested key that names a secret as ``"<redacted>"``, for its ``str()``: the
    key is as secret inside a cell as it is as a column.

    At most ``keep`` entries are visited in all, in the order ``str()`` prints them: every
    entry's text takes at least 3 bytes, so the ones after them begin past the cell's cut. A
    container met again on its own path (a dict holding itself) is not entered again, so a
    cycle or a structure that refers to one part many times costs ``keep`` visits, not one
    per path through it."""

    def __init__(self, redact: Redaction, keep: int) -> None:
        self.redact = redact
        self.left = keep
        self.on_path: set[int] = set()

    def __call__(self, value: Any, depth: int = 0) -> Any:
        if not isinstance(value, (Mapping, list, tuple)) or depth >= _MAX_DEPTH:
            return value
        if id(value) in self.on_path:
            return _ELIDED
        self.on_path.add(id(value))
        try:
            if isinstance(value, Mapping):
                out: dict[Any, Any] = {}
                for key, entry in readable_items(value):
                    if self.left <= 0:
                        out[_ELIDED] = _ELIDED
                        break
                    self.left -= 1
                    secret = entry is not None and self.redact.secret(key_text(key))
                    out[key] = REDACTED if secret else self(entry, depth + 1)
                return out
            entries: list[Any] = []
            for entry in value:
                if self.left <= 0:
                    entries.append(_ELIDED)
                    break
                self.left -= 1
                entries.append(self(entry, depth + 1))
            return tuple(entries) if isinstance(value, tuple) else entries
        finally:
            self.on_path.discard(id(value))


class _Cells:
    def __init__(self, max_cell_bytes: int, redact: Redaction = DEFAULT_REDACTION) -> None:
        self.max_bytes = max_cell_bytes
        self.redact = redact
        self.cut = 0
        self.replaced = 0

    def name(self, key: Any) -> str:
        text, replaced = utf8_text(key_text(key))
        self.replaced += replaced
        return text

    def __call__(self, value: Any) -> Any:
        if type(value) is str:
            text = value
        else:
            plain = as_plain(value if type(value) in _PLAIN else _head(value, self.max_bytes))
            if type(plain) is int:
                number = printable_int(plain)
                self.replaced += number is not plain
                return number
            if isinstance(plain, _PLAIN):
                return plain
            if isinstance(plain, str):
                text = plain
            else:
                try:
                    if isinstance(plain, (Mapping, list, tuple)) and self.redact.enabled:
                        keep = self.max_bytes // 3 + 2
                        plain = _WithoutSecrets(self.redact, keep)(plain)
                    text = str(plain)
                except Exception:
                    text = f"<{type(plain).__name__}>"
        text, cut = cut_text(text, self.max_bytes)
        self.cut += cut
        text, replaced = utf8_text(text)
        if replaced:  # an escape is longer than its surrogate: cut again, on its boundary
            self.replaced += 1
            text = cut_text(text, self.max_bytes)[0]
        return text


def _free_name(name: str, taken: Mapping[str, Any]) -> str:
    """``name`` with the first ``#2``, ``#3``... suffix no column of the row has."""
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def to_samples(
    rows: Any,
    max_rows: int = MAX_SAMPLE_ROWS,
    max_cell_bytes: int = MAX_CELL_BYTES,
    redact: Redaction = DEFAULT_REDACTION,
) -> list[dict[str, Any]]:
    """``rows`` (a list or tuple of mappings) as bounded rows of JSON values; a column whose
    name names a secret (``redact``: :mod:`rlmetrics.redaction`) holds ``"<redacted>"``.
    Never raises; what is dropped or cut is said once (see the module's docstring)."""
    if not isinstance(rows, (list, tuple)):
        warn_once(
            "samples:not-a-list",
            f"rlmetrics: log_samples takes a list of dicts (one per sample), got "
            f"{describe_value(rows)}; nothing logged",
        )
        return []
    if len(rows) > max_rows:
        warn_once(
            "samples:rows",
            f"rlmetrics: log_samples got {len(rows)} rows; the first {max_rows} are logged "
            "(Logger(max_sample_rows=...)); later cuts at DEBUG",
        )
    cells = _Cells(max_cell_bytes, redact)
    out: list[dict[str, Any]] = []
    skipped = collided = 0
    for row in rows[:max_rows]:
        if not isinstance(row, Mapping):
            skipped += 1
            continue
        items = readable_items(row)
        if len(items) > MAX_SAMPLE_COLUMNS:
            warn_once(
                "samples:columns",
                f"rlmetrics: a sample row has {len(items)} columns; the first "
                f"{MAX_SAMPLE_COLUMNS} are logged",
            )
        row_out: dict[str, Any] = {}
        for key, value in items[:MAX_SAMPLE_COLUMNS]:
            name = cells.name(key)
            if name in row_out:  # keys 1 and "1": one name, two values
                collided += 1
                name = _free_name(name, row_out)
            secret = value is not None and redact.secret(name)
            row_out[name] = REDACTED if secret else cells(value)
        out.append(row_out)
    if collided:
        warn_once(
            "samples:same-name",
            f"rlmetrics: {collided} sample column(s) had the name of another column of their "
            "row (keys 1 and '1'); each is logged under its name and a #2, #3... suffix",
        )
    if skipped:
        warn_once(
            "samples:not-a-row",
            f"rlmetrics: {skipped} sample row(s) were not dicts and are skipped; the other "
            "rows are logged",
        )
    if cells.replaced:
        warn_once(
            "samples:replaced",
            f"rlmetrics: {cells.replaced} sample cell(s) or column name(s) held text UTF-8 "
            "cannot hold (a lone surrogate, logged as its \\udXXX escape) or an int too long "
            "to print (logged as '<int of N digits>'); only those are replaced",
        )
    if cells.cut:
        warn_once(
            "samples:cell",
            f"rlmetrics: {cells.cut} sample cell(s) held more than {max_cell_bytes} bytes of "
            "text and were cut to it (Logger(max_cell_bytes=...)); later cuts at DEBUG",
        )
    return out


def columns_of(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every column of ``rows``: prompt, completion and reward first, then the others in the
    order they first appear."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    first = [c for c in FIRST_COLUMNS if c in seen]
    return first + [c for c in seen if c not in FIRST_COLUMNS]


def _markdown_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as a Markdown table (TensorBoard's text plugin renders one); ``|`` escaped and
    line breaks as ``<br>`` so a completion stays in its cell."""
    lines = [
        "| " + " | ".join(_markdown_cell(c) for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(_markdown_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
