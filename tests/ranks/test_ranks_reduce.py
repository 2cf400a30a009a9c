"""The reduction math, without torch: each kind against its definition over any ranks'
values, absent and non-finite values left out (and named) — unless no rank's value is finite:
then the run's value is not finite either — weights and stragglers."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.ranks import Column, merge_columns
from rlmetrics.spec import Reduce

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
value = st.one_of(st.none(), finite, st.sampled_from([math.nan, math.inf, -math.inf]))
columns = st.lists(value, min_size=1, max_size=40)


def _kept(column: list[float | None]) -> list[float]:
    return [v for v in column if v is not None and math.isfinite(v)]


def _not_finite(column: list[float | None]) -> float | None:
    """The run's value of a column some rank logged but none as a finite number (None for any
    other column): every value +inf is inf, every one -inf is -inf, anything else NaN."""
    found = {"nan" if math.isnan(v) else v for v in column if v is not None}
    if not found or _kept(column):
        return None
    return found.pop() if found in ({math.inf}, {-math.inf}) else math.nan  # type: ignore[return-value]


def _same(found: float, expected: float) -> bool:
    return found == expected or (math.isnan(found) and math.isnan(expected))


def _left_out(column: list[float | None], key: str) -> list[tuple[int, str]]:
    """The ``(rank, key)`` a merge leaves out: the non-finite values of a column that has a
    finite one too."""
    if not _kept(column):
        return []
    return [(rank, key) for rank, v in enumerate(column) if v is not None and not math.isfinite(v)]


@given(columns, st.sampled_from([Reduce.SUM, Reduce.MEAN, Reduce.MIN, Reduce.MAX, Reduce.LAST]))
def test_each_kind_is_its_definition_over_the_finite_values(
    column: list[float | None], kind: Reduce
) -> None:
    merged = merge_columns([Column("k", kind)], {"k": column})
    kept = _kept(column)
    assert sorted(merged.dropped) == _left_out(column, "k")
    if not kept:
        not_finite = _not_finite(column)
        if not_finite is None:
            assert merged.values == {}
        else:
            assert _same(merged.values["k"], not_finite)
        return
    expected = {
        Reduce.SUM: math.fsum(kept),
        Reduce.MEAN: math.fsum(kept) / len(kept),
        Reduce.MIN: min(kept),
        Reduce.MAX: max(kept),
        Reduce.LAST: kept[-1],
    }[kind]
    assert merged.values == {"k": expected}


@given(st.lists(st.tuples(finite, st.floats(min_value=0.5, max_value=1e4)), min_size=1))
def test_a_weighted_mean_weighs_each_rank_by_its_weight(pairs: list[tuple[float, float]]) -> None:
    values = {"m": [v for v, _ in pairs], "n": [w for _, w in pairs]}
    merged = merge_columns([Column("m", Reduce.WEIGHTED_MEAN, "n")], values)
    total = math.fsum(w for _, w in pairs)
    assert merged.values["m"] == math.fsum(v * w for v, w in pairs) / total
    assert merged.unweighted == []


def test_a_weighted_mean_without_a_rank_s_weight_is_a_plain_mean_and_says_so() -> None:
    merged = merge_columns(
        [Column("m", Reduce.WEIGHTED_MEAN, "n")], {"m": [1.0, 3.0], "n": [10.0, None]}
    )
    assert merged.values == {"m": 2.0}
    assert merged.unweighted == ["m"]


@given(st.lists(st.floats(min_value=0, max_value=1e4), min_size=1, max_size=1024))
def test_a_straggler_names_the_slowest_rank(seconds: list[float]) -> None:
    merged = merge_columns([Column("t", Reduce.STRAGGLER)], {"t": list(seconds)})
    straggler = merged.stragglers["t"]
    assert merged.values["t"] == straggler.max == max(seconds)
    assert straggler.min == min(seconds)
    assert straggler.mean == math.fsum(seconds) / len(seconds)
    assert straggler.slowest_rank == seconds.index(max(seconds))
    mean = straggler.mean
    assert straggler.skew == (max(seconds) / mean if mean > 0 else None)
    items = straggler.items("t")
    assert items["t/slowest_rank"] == seconds.index(max(seconds))


_KINDS = [Reduce.SUM, Reduce.MEAN, Reduce.MIN, Reduce.MAX, Reduce.LAST, Reduce.STRAGGLER]
_NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


@given(
    st.sampled_from([*_KINDS, Reduce.WEIGHTED_MEAN]),
    st.lists(st.one_of(st.none(), _NOT_FINITE), min_size=1, max_size=16),
)
def test_a_key_no_rank_logged_as_a_finite_number_is_not_finite_in_the_run_s_row(
    kind: Reduce, column: list[float | None]
) -> None:
    """A divergence on every rank (each rank's loss NaN) is NaN in the run's row, as one
    process logs it; every rank's +inf is inf, every rank's -inf is -inf, any other mix NaN,
    whatever the reduction. Named in ``not_finite`` (the caller says it once), not in
    ``dropped`` (nothing is left out). Before: the key vanished from the run's row."""
    weight = "n" if kind is Reduce.WEIGHTED_MEAN else None
    merged = merge_columns([Column("k", kind, weight)], {"k": column, "n": [1.0] * len(column)})
    expected = _not_finite(column)
    if expected is None:  # no rank logged it
        assert merged.values == {} and merged.not_finite == []
        return
    assert list(merged.values) == ["k"] and _same(merged.values["k"], expected)
    assert merged.not_finite == ["k"]
    assert merged.dropped == [] and merged.stragglers == {} and merged.unweighted == []


@given(
    st.integers(min_value=1, max_value=8).flatmap(
        lambda ranks: st.lists(
            st.tuples(
                st.sampled_from(_KINDS),
                st.lists(st.one_of(finite, finite, finite, value), min_size=ranks, max_size=ranks),
            ),
            min_size=1,
            max_size=12,
        )
    )
)
def test_a_table_of_many_keys_merges_each_key_as_it_would_alone(
    table: list[tuple[Reduce, list[float | None]]],
) -> None:
    # The common step (every value present and finite) merges a kind at a time; any other,
    # key by key: either way each key is its definition, in the table's order.
    columns = [Column(f"k{i:02d}", kind) for i, (kind, _) in enumerate(table)]
    values = {f"k{i:02d}": column for i, (_, column) in enumerate(table)}
    merged = merge_columns(columns, values)
    expected: dict[str, float] = {}
    for (kind, column), spec in zip(table, columns, strict=True):
        kept = _kept(column)
        if not kept:
            not_finite = _not_finite(column)
            if not_finite is not None:
                expected[spec.key] = not_finite
            continue
        expected[spec.key] = {
            Reduce.SUM: math.fsum(kept),
            Reduce.MEAN: math.fsum(kept) / len(kept),
            Reduce.MIN: min(kept),
            Reduce.MAX: max(kept),
            Reduce.LAST: kept[-1],
            Reduce.STRAGGLER: max(kept),
        }[kind]
    assert list(merged.values) == list(expected)
    assert all(_same(merged.values[key], value) for key, value in expected.items())
    assert merged.not_finite == [key for key in expected if not math.isfinite(expected[key])]
    assert sorted(merged.stragglers) == sorted(
        spec.key
        for spec, (kind, column) in zip(columns, table, strict=True)
        if kind is Reduce.STRAGGLER and _kept(column)
    )
    for key, straggler in merged.stragglers.items():
        kept = _kept(values[key])
        assert (straggler.min, straggler.mean) == (min(kept), math.fsum(kept) / len(kept))
    assert sorted(merged.dropped) == sorted(
        left for key, column in values.items() for left in _left_out(column, key)
    )
