"""docs/writing-a-plugin.md shows the files of a plugin: a block headed by the file's path
(``# src/acme_rlmetrics/backend.py``) is what an author copies into that file, so it must be
a whole module, binding every name it uses. (The page's blocks run in tests/docs/
test_docs_examples.py with ``rlmetrics`` already imported, which hides a missing import; an
excerpt says so with a ``given`` marker.)"""

from __future__ import annotations

import builtins
import re
import symtable
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-plugin.md"
_BLOCK = re.compile(r"^```python\n(# src/\S+\.py)\n(.*?)^```", re.S | re.M)


def _module_blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text()
    found = []
    for block in _BLOCK.finditer(text):
        above = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if "example: given" not in above:  # an excerpt, its marker says what it leaves out
            found.append(
                (
                    f"{block.group(1)[2:]}@{text[: block.start()].count(chr(10)) + 1}",
                    block.group(1) + "\n" + block.group(2),
                )
            )
    return found


def _unbound(code: str, where: str) -> set[str]:
    """The global names ``code`` reads but neither binds nor gets from builtins."""
    module = symtable.symtable(code, where, "exec")
    bound = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported()}
    read: set[str] = set()
    tables = [module]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        read |= {
            s.get_name()
            for s in table.get_symbols()
            if s.is_referenced() and (s.is_global() or table is module)
        }
    return read - bound - set(dir(builtins))


BLOCKS = _module_blocks()


def test_the_page_shows_the_plugins_files() -> None:
    assert {where.split("@")[0] for where, _ in BLOCKS} >= {
        "src/acme_rlmetrics/family.py",
        "src/acme_rlmetrics/backend.py",
    }


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_file_the_page_shows_binds_every_name_it_uses(where: str, code: str) -> None:
    assert _unbound(code, where) == set(), f"{where}: import or define these"
