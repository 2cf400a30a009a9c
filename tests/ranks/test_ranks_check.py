"""Declared reductions: built and described with the spec, and ``rlmetrics check`` refuses a
reduction that does not fit its instrument, saying what to change."""

from __future__ import annotations

import pytest

from rlmetrics.check import check_declared
from rlmetrics.plugins import hooks
from rlmetrics.registry import Declared, default_registry
from rlmetrics.spec import (
    MAX,
    MEAN,
    STRAGGLER,
    SUM,
    Kind,
    MetricSpec,
    Reduce,
    Reduction,
    SpecError,
    weighted_mean,
)


def findings(*specs: MetricSpec) -> list[tuple[str, str]]:
    declared = [Declared("g", spec, "tests") for spec in specs]
    result = check_declared(declared, lambda _item: "test:plugin")
    return [(f.metric, f.message) for f in result.findings if f.rule == "reduce"]


def test_a_spec_without_a_reduction_is_a_mean_for_a_gauge_and_a_sum_otherwise() -> None:
    assert MetricSpec("a.b", Kind.GAUGE).reduction == MEAN
    assert MetricSpec("a.b", Kind.COUNTER).reduction == SUM
    assert MetricSpec("a.b", Kind.HISTOGRAM, buckets=[1]).reduction == SUM
    assert MetricSpec("a.b", Kind.GAUGE, reduce="max").reduction == MAX
    assert MetricSpec("a.b", Kind.GAUGE, reduce=weighted_mean("a.n")).describe()["reduce"] == (
        "weighted_mean(a.n)"
    )


@pytest.mark.parametrize(
    ("reduce", "message"),
    [
        (5, "is not a reduction; use one of"),
        ("median", "is not a reduction; use one of"),
    ],
)
def test_a_reduction_that_is_none_is_refused_at_construction(reduce: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        MetricSpec("a.b", Kind.GAUGE, reduce=reduce)


def test_a_weighted_mean_names_its_weight() -> None:
    with pytest.raises(SpecError, match="names the series that weighs it"):
        Reduction(Reduce.WEIGHTED_MEAN)
    with pytest.raises(SpecError, match="only a weighted mean takes a weight"):
        Reduction(Reduce.SUM, "a.n")


def test_check_refuses_a_counter_reduced_by_mean() -> None:
    [(metric, message)] = findings(MetricSpec("a.count", Kind.COUNTER, reduce=MEAN))
    assert metric == "a.count"
    assert "does not fit a counter" in message and "reduce= one of sum" in message


def test_check_refuses_a_histogram_reduced_by_max_and_a_straggler_that_is_not_seconds() -> None:
    found = dict(
        findings(
            MetricSpec("a.h", Kind.HISTOGRAM, buckets=[1], reduce=MAX),
            MetricSpec("a.rows", Kind.GAUGE, unit="{row}", reduce=STRAGGLER),
            MetricSpec("a.phase", Kind.GAUGE, unit="s", reduce=STRAGGLER),
        )
    )
    assert "histogram's counts and buckets" in found["a.h"]
    assert "straggler is for phase times" in found["a.rows"]
    assert "a.phase" not in found


def test_check_refuses_a_weighted_mean_whose_weight_is_missing_or_does_not_sum() -> None:
    found = dict(
        findings(
            MetricSpec("a.mean", Kind.GAUGE, reduce=weighted_mean("a.samples")),
            MetricSpec("b.mean", Kind.GAUGE, reduce=weighted_mean("b.samples")),
            MetricSpec("b.samples", Kind.GAUGE, reduce=MEAN),
            MetricSpec("c.mean", Kind.GAUGE, reduce=weighted_mean("c.mean")),
        )
    )
    assert "weighs by a series nobody declared" in found["a.mean"]
    assert "declare it reduce=SUM" in found["b.mean"]
    assert "cannot weigh by itself" in found["c.mean"]


def test_every_shipped_family_declares_its_reduction() -> None:
    hooks()  # every installed distribution declares
    undeclared = [
        f"{item.owner}: {item.spec.name}"
        for item in default_registry().declared()
        if item.spec.reduce is None
        and not item.owner.startswith(("tests", "rlmetrics.testing"))
        and item.owner.split(".")[0]
        in {"rlmetrics", "rlmetrics_vllm", "rlmetrics_gym", "rlmetrics_ray"}
    ]
    assert undeclared == []
    result = check_declared(default_registry().declared(), lambda _item: "installed")
    assert [f for f in result.findings if f.rule == "reduce"] == []
