"""What every tracker can store of a value: text that is UTF-8, an int that prints.

Two plain Python values have no form a tracker can write, and each used to cost a whole call:

* a ``str`` holding a lone surrogate (text decoded with ``surrogateescape``, a JSON
  ``"\\ud800"`` escape, half of a UTF-16 pair) does not encode as UTF-8, and protobuf
  (TensorBoard, SwanLab), sqlite (MLflow params) and pandas' JSON writer (MLflow tables) refuse
  the whole record that holds one. Such a surrogate becomes its escape, ``\\ud800``: the rest
  of the text is kept and the replacement says what was there;
* an ``int`` of more than 4,300 digits has no ``str()`` (Python's ``int_max_str_digits``
  guard), and every tracker prints what it stores. It becomes ``"<int of N digits>"``, as the
  JSONL backend writes it.

Hyperparameters and sample cells pass through here on the caller's thread, so such a value
costs only itself in every backend (each call says it once). Nothing here raises.
"""

from __future__ import annotations

import math

__all__ = ["decimal_digits", "printable_int", "utf8_text"]

#: Below this many bits an int has fewer than 4,300 digits: ``str()`` is never refused.
_SAFE_BITS = 14_000


def utf8_text(text: str) -> tuple[str, bool]:
    """``text`` as text UTF-8 can hold (each lone surrogate as its ``\\udXXX`` escape), and
    whether anything was replaced. Costs one encode; nothing for ASCII text."""
    if text.isascii():
        return text, False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8"), True
    return text, False


def decimal_digits(number: int) -> int:
    """The decimal digits of ``number``, without printing it (the JSONL backend's stand-in
    for an int too long to print says it too)."""
    digits = max(1, int(abs(number).bit_length() * math.log10(2)))
    while 10**digits <= abs(number):
        digits += 1
    return digits


def printable_int(number: int) -> int | str:
    """``number`` if it has a ``str()``, else ``"<int of N digits>"``."""
    if number.bit_length() < _SAFE_BITS:
        return number
    try:
        str(number)
    except ValueError:
        return f"<int of {decimal_digits(number)} digits>"
    return number
