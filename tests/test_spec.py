from __future__ import annotations

import pytest

from rlmetrics import OPEN, Kind, MetricSpec, SpecError


def test_defaults_key_to_name_and_freezes_attributes() -> None:
    spec = MetricSpec(
        "rl.setup.duration",
        Kind.GAUGE,
        unit="s",
        attributes={"rl.setup.phase": OPEN, "rl.bucket": ["idle", "wasted"]},
    )
    assert spec.key == "rl.setup.duration"
    assert spec.attributes == (
        ("rl.bucket", frozenset({"idle", "wasted"})),
        ("rl.setup.phase", None),
    )
    assert spec.open_attributes
    assert hash(spec) == hash(
        MetricSpec(
            "rl.setup.duration",
            "gauge",
            unit="s",
            attributes={"rl.bucket": {"wasted", "idle"}, "rl.setup.phase": None},
        )
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "1bad"}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "a" * 256}, "name"),
        ({"name": "rl:colon"}, "name"),
        ({"unit": "s s"}, "unit"),
        ({"unit": "{token"}, "unit"),
        ({"unit": "x" * 64}, "unit"),
        ({"unit": "µs"}, "unit"),
        ({"key": ""}, "key"),
        ({"buckets": [1, 2]}, "buckets"),
        ({"kind": Kind.HISTOGRAM, "buckets": [2, 1]}, "buckets"),
        ({"kind": Kind.HISTOGRAM, "buckets": [1, float("inf")]}, "buckets"),
        ({"kind": Kind.HISTOGRAM, "buckets": []}, "buckets"),
        ({"kind": Kind.OBSERVABLE_GAUGE}, "callback"),
        ({"callback": lambda: []}, "callback"),
        ({"attributes": {"k": set()}}, "attributes"),
        ({"attributes": {"k": {1, 2}}}, "attributes"),
        ({"attributes": {"": None}}, "attributes"),
        ({"max_series": 0}, "max_series"),
    ],
)
def test_invalid_field_is_named_in_the_error(kwargs: dict, field: str) -> None:
    args = {"name": "rl.x", "kind": Kind.GAUGE, **kwargs}
    with pytest.raises(SpecError) as raised:
        MetricSpec(args.pop("name"), args.pop("kind"), **args)
    assert f"field {field!r}" in str(raised.value)
    assert repr(kwargs.get("name", "rl.x")) in str(raised.value)


def test_a_histogram_bucket_below_zero_is_refused_saying_why() -> None:
    """Before: declared (rl.trajectory.reward's buckets ran from -10), and never filled: a
    histogram instrument takes no negative value, the SDK drops it."""
    with pytest.raises(SpecError, match="takes no negative value") as raised:
        MetricSpec("rl.x", Kind.HISTOGRAM, buckets=[-1, 0, 1])
    assert "up-down counter" in str(raised.value)
    assert MetricSpec("rl.x", Kind.HISTOGRAM, buckets=[0, 1]).buckets == (0, 1)


def test_single_string_as_closed_set_is_refused() -> None:
    with pytest.raises(SpecError, match="single string"):
        MetricSpec("rl.x", Kind.GAUGE, attributes={"k": "idle"})


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        MetricSpec("rl.x", "sometimes")


@pytest.mark.parametrize("unit", ["s", "ms", "By", "{token}", "{token}/s", "%", "1", ""])
def test_common_units_are_accepted(unit: str) -> None:
    assert MetricSpec("rl.x", Kind.COUNTER, unit=unit).unit == unit


def test_conflicts_name_the_differing_fields() -> None:
    a = MetricSpec("rl.x", Kind.GAUGE, unit="s")
    b = MetricSpec("rl.x", Kind.COUNTER, unit="ms")
    assert a.conflicts_with(b) == ["kind", "unit"]
    assert a.conflicts_with(MetricSpec("rl.x", Kind.GAUGE, unit="s", callback=None)) == []


@pytest.mark.parametrize(
    ("kind", "keys", "label"),
    [
        (Kind.GAUGE, ("rl.env", "rl_env"), "rl_env"),
        (Kind.HISTOGRAM, ("le",), "le"),
        (Kind.COUNTER, ("otel.scope.name",), "otel_scope_name"),
    ],
)
def test_an_attribute_whose_prometheus_label_is_taken_is_refused_naming_it(
    kind: Kind, keys: tuple[str, ...], label: str
) -> None:
    """Before, each was declared and its values lost on the Prometheus endpoint without a
    word: rl.env's value overwritten by rl_env's, a histogram's own le by the bucket bound
    (and le="v" on its _count and _sum), the scope's name by the attribute's."""
    with pytest.raises(SpecError, match=f"Prometheus label '{label}'") as raised:
        MetricSpec(
            "rl.x",
            kind,
            attributes={key: OPEN for key in keys},
            buckets=[1.0] if kind is Kind.HISTOGRAM else None,
        )
    assert repr(keys[-1]) in str(raised.value)
    MetricSpec("rl.x", Kind.GAUGE, attributes={"le": OPEN})  # a gauge has no le of its own
