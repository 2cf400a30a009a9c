"""The key pattern grammar: ``*`` one path segment, ``**`` any rest, anything else literal."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.key_patterns import ANY, is_pattern, pattern_regex

_SEGMENT = st.text(st.characters(exclude_characters="/*"), min_size=1, max_size=8)
_KEY = st.lists(_SEGMENT, min_size=1, max_size=4).map("/".join)


@given(_KEY, _KEY)
def test_a_key_without_a_star_matches_itself_only(pattern: str, key: str) -> None:
    assert not is_pattern(pattern)
    assert bool(pattern_regex(pattern).fullmatch(key)) == (key == pattern)


@given(_SEGMENT, _KEY)
def test_one_star_is_one_segment_and_two_are_any_rest(head: str, rest: str) -> None:
    key = f"{head}/{rest}"
    assert (pattern_regex(f"{head}/*").fullmatch(key) is None) == ("/" in rest)
    assert pattern_regex(f"{head}/**").fullmatch(key) is not None
    assert pattern_regex(f"{head}/**").fullmatch(head) is None  # ** is a non-empty rest
    assert pattern_regex(ANY).fullmatch(key) and pattern_regex(ANY).fullmatch("")
