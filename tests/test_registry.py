from __future__ import annotations

import logging
import os
from typing import Any

import pytest

import rlmetrics
from rlmetrics import OPEN, DeclarationError, Kind, LateDeclarationError, MetricSpec
from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import in_memory_telemetry, points, single

GROUP = "t"


def _declare_all_kinds(observed: list[tuple[float, dict[str, str]]]) -> None:
    rlmetrics.declare(
        GROUP,
        [
            MetricSpec(
                "t.gauge",
                Kind.GAUGE,
                unit="s",
                key="gauge",
                attributes={"phase": OPEN},
                max_series=3,
            ),
            MetricSpec(
                "t.counter",
                Kind.COUNTER,
                unit="{token}",
                key="counter",
                attributes={"outcome": {"ok", "failed"}},
            ),
            MetricSpec("t.updown", Kind.UP_DOWN_COUNTER, unit="{request}", key="updown"),
            MetricSpec(
                "t.histogram", Kind.HISTOGRAM, unit="s", key="histogram", buckets=[0.5, 1, 10]
            ),
            MetricSpec(
                "t.obs.gauge",
                Kind.OBSERVABLE_GAUGE,
                unit="By",
                key="obs_gauge",
                attributes={"host": OPEN},
                callback=lambda: observed,
            ),
            MetricSpec(
                "t.obs.counter",
                Kind.OBSERVABLE_COUNTER,
                unit="1",
                key="obs_counter",
                callback=lambda: [(7, {})],
            ),
            MetricSpec(
                "t.obs.updown",
                Kind.OBSERVABLE_UP_DOWN_COUNTER,
                key="obs_updown",
                callback=lambda: [(-2, {})],
            ),
        ],
    )


def test_sdk_version_is_the_one_this_env_pins() -> None:
    from importlib.metadata import version

    expected = os.environ.get("RLMETRICS_EXPECT_SDK")
    if expected is None:
        pytest.skip("not running under a tox SDK env (RLMETRICS_EXPECT_SDK unset)")
    assert version("opentelemetry-sdk") == expected


def test_every_kind_exports_name_unit_type_attributes_and_value() -> None:
    observed = [(1024.0, {"host": "a"})]
    _declare_all_kinds(observed)
    with in_memory_telemetry(run_id="run-7") as (_handle, reader):
        rlmetrics.record(GROUP, {"gauge": 1.5}, {"phase": "load"})
        rlmetrics.record(GROUP, {"counter": 3}, {"outcome": "ok"})
        rlmetrics.record(GROUP, {"counter": 4}, {"outcome": "ok"})
        rlmetrics.record(GROUP, {"updown": 5})
        rlmetrics.record(GROUP, {"updown": -2})
        rlmetrics.record(GROUP, {"histogram": 0.25})
        rlmetrics.record(GROUP, {"histogram": 2.0})
        found = points(reader)

    gauge = single(found, "t.gauge", phase="load")
    assert (gauge.kind, gauge.unit, gauge.value, gauge.attributes) == (
        "gauge",
        "s",
        1.5,
        {"phase": "load"},
    )
    counter = single(found, "t.counter")
    assert (counter.kind, counter.monotonic, counter.unit, counter.value) == (
        "sum",
        True,
        "{token}",
        7,
    )
    assert counter.attributes == {"outcome": "ok"}
    updown = single(found, "t.updown")
    assert (updown.kind, updown.monotonic, updown.value) == ("sum", False, 3)
    histogram = single(found, "t.histogram")
    assert (histogram.kind, histogram.unit, histogram.count, histogram.sum) == (
        "histogram",
        "s",
        2,
        2.25,
    )
    assert histogram.bounds == (0.5, 1.0, 10.0)
    assert histogram.bucket_counts == (1, 0, 1, 0)
    assert single(found, "t.obs.gauge").value == 1024.0
    obs_counter = single(found, "t.obs.counter")
    assert (obs_counter.kind, obs_counter.monotonic, obs_counter.value) == ("sum", True, 7)
    assert single(found, "t.obs.updown").value == -2
    assert gauge.resource["rlmetrics.run.id"] == "run-7"
    assert gauge.resource["service.name"] == "rlmetrics-test"


def test_gauge_is_still_exported_in_a_second_collection() -> None:
    # SDK 1.44's synchronous gauge would be gone here; ours must not be, on any version.
    _declare_all_kinds([])
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"gauge": 2.0}, {"phase": "a"})
        first = points(reader)
        second = points(reader)
    assert single(first, "t.gauge", phase="a").value == 2.0
    assert single(second, "t.gauge", phase="a").value == 2.0


def test_gauge_keeps_the_last_value_per_attribute_set() -> None:
    _declare_all_kinds([])
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"gauge": 1.0}, {"phase": "a"})
        rlmetrics.record(GROUP, {"gauge": 3.0}, {"phase": "a"})
        rlmetrics.record(GROUP, {"gauge": 5.0}, {"phase": "b"})
        found = [p for p in points(reader) if p.name == "t.gauge"]
    assert {p.attributes["phase"]: p.value for p in found} == {"a": 3.0, "b": 5.0}


def test_each_collection_exports_the_value_last_written_over_the_previous() -> None:
    # A gauge's point is overwritten in place from the second write on; each path that writes
    # one (unlabelled, a prepared attribute set, a mapping) must still export its last value.
    _declare_all_kinds([])
    prepared = frozenset({"phase": "a"}.items())
    exported = []
    with in_memory_telemetry() as (_handle, reader):
        for value in (1.0, 2.0, 3):
            rlmetrics.record(GROUP, {"gauge": value})
            rlmetrics.record_points(GROUP, "gauge", [(value + 10.0, prepared)])
            rlmetrics.record(GROUP, {"gauge": value + 20}, {"phase": "b"})
            found = [p for p in points(reader) if p.name == "t.gauge"]
            exported.append({p.attributes.get("phase"): p.value for p in found})
        rlmetrics.retract(GROUP, "gauge", prepared)
        rlmetrics.record_points(GROUP, "gauge", [(9.0, prepared)])
        found = [p for p in points(reader) if p.name == "t.gauge"]
    assert exported == [
        {None: 1.0, "a": 11.0, "b": 21.0},
        {None: 2.0, "a": 12.0, "b": 22.0},
        {None: 3, "a": 13.0, "b": 23},
    ]
    assert {p.attributes.get("phase"): p.value for p in found} == {None: 3, "a": 9.0, "b": 23}


def test_retracted_attribute_set_disappears() -> None:
    _declare_all_kinds([])
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"gauge": 1.0}, {"phase": "a"})
        rlmetrics.record(GROUP, {"gauge": 2.0}, {"phase": "b"})
        assert len([p for p in points(reader) if p.name == "t.gauge"]) == 2
        rlmetrics.retract(GROUP, "gauge", {"phase": "a"})
        after = [p for p in points(reader) if p.name == "t.gauge"]
    assert [p.attributes for p in after] == [{"phase": "b"}]


def test_observable_attribute_set_no_longer_reported_disappears() -> None:
    observed = [(1.0, {"host": "a"}), (2.0, {"host": "b"})]
    _declare_all_kinds(observed)
    with in_memory_telemetry() as (_handle, reader):
        assert {p.attributes["host"] for p in points(reader) if p.name == "t.obs.gauge"} == {
            "a",
            "b",
        }
        observed.pop(0)
        assert [p.attributes for p in points(reader) if p.name == "t.obs.gauge"] == [{"host": "b"}]


def test_record_drops_each_bad_input_and_keeps_the_valid_values(caplog: Any) -> None:
    _declare_all_kinds([])
    with in_memory_telemetry() as (_handle, reader):
        # DEBUG: a second failure of the same cause is reported at debug level.
        with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
            rlmetrics.record(
                GROUP,
                {
                    "gauge": 4.0,
                    "unknown": 1.0,
                    "histogram": "slow",
                    "updown": True,
                    "counter": float("nan"),
                    "obs_gauge": 3.0,
                },
                {"phase": "ok"},
            )
            rlmetrics.record(
                GROUP, {"histogram": float("inf"), "updown": None, "gauge": 6.0}, {"phase": "ok2"}
            )
            rlmetrics.record(GROUP, {"gauge": 1.0}, {"undeclared": "x"})
            rlmetrics.record(GROUP, {"counter": 1, "gauge": 9.0}, {"outcome": "maybe"})
            rlmetrics.record(GROUP, {"gauge": 1.0}, {"phase": 3.5})  # type: ignore[dict-item]
            rlmetrics.record(GROUP, {"counter": -1})
            rlmetrics.record(GROUP, {"gauge": 7.0}, {"phase": "third"})
            rlmetrics.record(GROUP, {"gauge": 8.0}, {"phase": "over-the-cap"})  # overflow
            rlmetrics.record("nope", {"gauge": 1.0})
            rlmetrics.record(GROUP, ["not", "a", "mapping"])  # type: ignore[arg-type]
            rlmetrics.record(GROUP, {"gauge": 1.0}, "phase=a")  # type: ignore[arg-type]
            rlmetrics.record(["unhashable"], {"gauge": 1.0})  # type: ignore[arg-type]
            rlmetrics.record_points(GROUP, "gauge", 5)  # type: ignore[arg-type]
        found = points(reader)

    assert {
        p.attributes.get("phase", "overflow"): p.value for p in found if p.name == "t.gauge"
    } == {"ok": 4.0, "ok2": 6.0, "third": 7.0, "overflow": 8.0}
    assert not [p for p in found if p.name in ("t.histogram", "t.updown", "t.counter")]
    messages = "\n".join(r.getMessage() for r in caplog.records)
    for fragment in [
        "'unknown' is not a declared key",
        "t.histogram (key 'histogram') dropped a value: a str of length 4 is not a finite number",
        "t.updown (key 'updown') dropped a value: a bool is not a finite number",
        # Before: "a float is not a finite number", which no reader can act on.
        "t.counter (key 'counter') dropped a value: a float (nan) is not a finite number",
        "exported through its callback",
        "attribute 'undeclared' is not declared",
        "attribute 'outcome' has a value outside its closed set",
        "attribute 'phase' must be a string or an int, got float",
        "a counter cannot take a negative value",
        "max_series=3",
        "no metric group 'nope'",
        "rlmetrics.record(a list) failed; values dropped",
        "rlmetrics.record('t') failed; values dropped",
    ]:
        assert fragment in messages, fragment
    # One line per dropped value: no stack, and never the logged string itself.
    assert not any(r.stack_info for r in caplog.records)
    assert "slow" not in messages


def test_record_warns_once_per_cause(caplog: Any) -> None:
    _declare_all_kinds([])
    with in_memory_telemetry(), caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(5):
            rlmetrics.record(GROUP, {"unknown": 1.0})
    levels = [r.levelno for r in caplog.records if "'unknown'" in r.getMessage()]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4


def test_negative_histogram_value_is_dropped_with_one_warning(caplog: Any) -> None:
    # The SDK drops a negative histogram value too, but logs a warning on every call: a loop
    # that logs a negative duration each step would flood its log.
    rlmetrics.declare(
        GROUP, [MetricSpec("t.h", Kind.HISTOGRAM, unit="s", key="h", attributes={"phase": OPEN})]
    )
    with in_memory_telemetry() as (_handle, reader), caplog.at_level(logging.DEBUG):
        for phase in (None, {"phase": "a"}):
            rlmetrics.record(GROUP, {"h": 2.0}, phase)  # the series and its set exist first
            for value in (-1.0, -3, -0.5):
                rlmetrics.record(GROUP, {"h": value}, phase)
        found = [p for p in points(reader) if p.name == "t.h"]  # not the drops' own count
    assert {(p.attributes.get("phase"), p.count, p.sum) for p in found} == {
        (None, 1, 2.0),
        ("a", 1, 2.0),
    }
    negative = [r for r in caplog.records if "negative" in r.getMessage()]
    assert [(r.name, r.levelno) for r in negative][:1] == [("rlmetrics", logging.WARNING)]
    assert all(r.name == "rlmetrics" for r in negative), [r.getMessage() for r in negative]
    assert "a histogram cannot take a negative value" in negative[0].getMessage()


def test_failing_callback_is_reported_and_other_series_still_export(caplog: Any) -> None:
    def broken() -> list[Any]:
        raise RuntimeError("node unreachable")

    rlmetrics.declare(
        GROUP,
        [
            MetricSpec("t.broken", Kind.OBSERVABLE_GAUGE, key="broken", callback=broken),
            MetricSpec(
                "t.mixed",
                Kind.OBSERVABLE_GAUGE,
                key="mixed",
                attributes={"host": OPEN},
                callback=lambda: [
                    (1.0, {"host": "a"}),
                    ("x", {"host": "b"}),
                    (2.0, {"rack": "r"}),
                    "junk",
                ],
            ),
            MetricSpec("t.fine", Kind.GAUGE, key="fine"),
        ],
    )
    with in_memory_telemetry() as (_handle, reader), caplog.at_level(logging.WARNING):
        rlmetrics.record(GROUP, {"fine": 1.0})
        found = points(reader)
    assert [p.value for p in found if p.name == "t.mixed"] == [1.0]
    assert single(found, "t.fine").value == 1.0
    assert not [p for p in found if p.name == "t.broken"]
    assert "callback of 't.broken' raised" in caplog.text


def test_record_is_a_noop_when_not_exporting() -> None:
    _declare_all_kinds([])
    assert not rlmetrics.is_exporting()
    rlmetrics.record(GROUP, {"gauge": 1.0})  # nothing bound: returns without touching anything
    with rlmetrics.start(service_name="no-readers") as handle:
        assert not handle.exporting and not rlmetrics.is_exporting()
        rlmetrics.record(GROUP, {"gauge": 1.0})
    with in_memory_telemetry() as (handle, _reader):
        assert handle.exporting and rlmetrics.is_exporting()
    assert not rlmetrics.is_exporting()


def test_identical_redeclaration_is_a_noop() -> None:
    spec = MetricSpec("t.same", Kind.GAUGE, unit="s")
    rlmetrics.declare(GROUP, [spec])
    rlmetrics.declare(GROUP, [MetricSpec("t.same", Kind.GAUGE, unit="s")])
    assert [d.spec for d in rlmetrics.default_registry().declared() if d.group == GROUP] == [spec]


@pytest.mark.parametrize(
    "rival",
    [
        MetricSpec("t.same", Kind.COUNTER, unit="s"),
        MetricSpec("t.same", Kind.GAUGE, unit="ms"),
        MetricSpec("t.same", Kind.GAUGE, unit="s", description="other"),
        MetricSpec("t.same", Kind.GAUGE, unit="s", attributes={"k": OPEN}),
        MetricSpec("T.SAME", Kind.GAUGE, unit="s"),  # OTel names are case-insensitive
        MetricSpec("t.other", Kind.GAUGE, unit="s", key="t.same"),
    ],
)
def test_conflicting_declaration_names_both_modules(rival: MetricSpec) -> None:
    registry = MetricRegistry()
    registry.declare(GROUP, [MetricSpec("t.same", Kind.GAUGE, unit="s")], owner="pkg.first")
    with pytest.raises(DeclarationError) as raised:
        registry.declare(GROUP, [rival], owner="pkg.second")
    assert "pkg.first" in str(raised.value) and "pkg.second" in str(raised.value)


def test_same_name_in_another_group_conflicts() -> None:
    registry = MetricRegistry()
    registry.declare("a", [MetricSpec("t.same", Kind.GAUGE)], owner="pkg.a")
    with pytest.raises(DeclarationError, match="differ in group"):
        registry.declare("b", [MetricSpec("t.same", Kind.GAUGE)], owner="pkg.b")


def test_histogram_bucket_conflict() -> None:
    registry = MetricRegistry()
    registry.declare(GROUP, [MetricSpec("t.h", Kind.HISTOGRAM, buckets=[1, 2])], owner="m1")
    with pytest.raises(DeclarationError, match="buckets"):
        registry.declare(GROUP, [MetricSpec("t.h", Kind.HISTOGRAM, buckets=[1, 3])], owner="m2")


def test_declare_names_the_calling_module() -> None:
    rlmetrics.declare(GROUP, [MetricSpec("t.owned", Kind.GAUGE)])
    [owned] = [d for d in rlmetrics.default_registry().declared() if d.spec.name == "t.owned"]
    assert owned.owner == __name__


def test_late_declaration_says_how_to_fix_it() -> None:
    with in_memory_telemetry(), pytest.raises(LateDeclarationError) as raised:
        rlmetrics.declare(GROUP, [MetricSpec("t.late", Kind.GAUGE)])
    message = str(raised.value)
    assert "before rlmetrics.start()" in message
    assert "entry point" in message
    assert __name__ in message


def test_late_declaration_in_a_script_says_to_move_it_above_start() -> None:
    # Before: "Import __main__ before rlmetrics.start()", which a script cannot do.
    from rlmetrics.registry import default_registry

    with in_memory_telemetry(), pytest.raises(LateDeclarationError) as raised:
        default_registry().declare(GROUP, [MetricSpec("t.late", Kind.GAUGE)], owner="__main__")
    message = str(raised.value)
    assert "Import __main__" not in message
    assert "In the script, declare it above the rlmetrics.start() call" in message


def test_recording_by_the_series_name_says_the_key_to_record_by(caplog: Any) -> None:
    # Before: "'t.depth' is not a declared key of group 't'", the key left to be found.
    rlmetrics.declare(GROUP, [MetricSpec("t.depth", Kind.GAUGE, key="t/depth")])
    with in_memory_telemetry() as (_handle, reader), caplog.at_level(logging.WARNING):
        rlmetrics.record(GROUP, {"t.depth": 3.0})
        rlmetrics.record(GROUP, {"t/depth": 4.0})
        assert single(points(reader), "t.depth").value == 4.0
    assert (
        "'t.depth' is not a declared key of group 't' (it is the name of the series whose "
        "key is 't/depth': record {'t/depth': value})"
    ) in caplog.text


def test_declaration_reopens_after_shutdown() -> None:
    with in_memory_telemetry():
        pass
    rlmetrics.declare(GROUP, [MetricSpec("t.after", Kind.GAUGE)])


def test_declare_rejects_a_non_spec() -> None:
    with pytest.raises(DeclarationError, match="expected MetricSpec"):
        rlmetrics.declare(GROUP, ["rl.reward.mean"])  # type: ignore[list-item]


@pytest.mark.parametrize("given", ["one spec", "a name"])
def test_declare_given_one_spec_not_a_list_says_to_put_it_in_one(given: str) -> None:
    # Before: "TypeError: 'MetricSpec' object is not iterable", and a name was taken
    # letter by letter ("expected MetricSpec, got 't'").
    spec = MetricSpec("t.single", Kind.GAUGE)
    specs: Any = spec if given == "one spec" else "t.single"
    with pytest.raises(DeclarationError, match=r"in a list: rlmetrics\.declare\('t', \[") as e:
        rlmetrics.declare(GROUP, specs)
    assert "test_registry" in str(e.value)  # the declaring module, as every declare error


def test_an_observable_callback_past_max_series_exports_the_cap_and_warns_once(
    caplog: Any,
) -> None:
    """Past the cap, one overflow point (h3's value, the last past it)."""
    observed = [(float(i), {"host": f"h{i}"}) for i in range(4)]  # the cap is 3
    rlmetrics.declare(
        GROUP,
        [
            MetricSpec(
                "t.obs.capped",
                Kind.OBSERVABLE_GAUGE,
                key="capped",
                attributes={"host": OPEN},
                max_series=3,
                callback=lambda: observed,
            )
        ],
    )
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"), in_memory_telemetry() as (_h, reader):
        first = [p for p in points(reader) if p.name == "t.obs.capped"]
        second = [p for p in points(reader) if p.name == "t.obs.capped"]
    overflow = {"otel.metric.overflow": True}
    assert sorted((p.attributes.get("host", "overflow"), p.value) for p in first) == [
        ("h0", 0.0),
        ("h1", 1.0),
        ("h2", 2.0),
        ("overflow", 3.0),
    ]
    assert [p.attributes for p in second if "host" not in p.attributes] == [overflow]
    assert len(second) == 4
    warnings = [r for r in caplog.records if "t.obs.capped" in r.getMessage()]
    assert [r.levelno for r in warnings] == [logging.WARNING, logging.DEBUG]
    assert "max_series=3" in warnings[0].getMessage()


def test_retracting_an_attribute_set_frees_its_slot_under_the_cap() -> None:
    _declare_all_kinds([])  # t.gauge: open "phase", max_series=3
    with in_memory_telemetry() as (_handle, reader):
        for phase in ("a", "b", "c"):
            rlmetrics.record(GROUP, {"gauge": 1.0}, {"phase": phase})
        rlmetrics.record(GROUP, {"gauge": 3.0}, {"phase": "d"})  # over the cap: overflow
        rlmetrics.retract(GROUP, "gauge", {"phase": "a"})
        rlmetrics.record(GROUP, {"gauge": 2.0}, {"phase": "e"})  # takes the freed slot
        found = {
            p.attributes.get("phase", "overflow"): p.value
            for p in points(reader)
            if p.name == "t.gauge"
        }
    assert found == {"b": 1.0, "c": 1.0, "e": 2.0, "overflow": 3.0}


def test_a_prepared_attribute_set_records_like_its_mapping(caplog: Any) -> None:
    _declare_all_kinds([])
    prepared = frozenset({"phase": "load"}.items())
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"), in_memory_telemetry() as (_h, r):
        rlmetrics.record(GROUP, {"gauge": 1.0}, prepared)
        rlmetrics.record(GROUP, {"gauge": 2.0}, {"phase": "load"})  # the same series
        rlmetrics.record(GROUP, {"gauge": 3.0}, frozenset({"not", "pairs"}))
        rlmetrics.record(GROUP, {"gauge": 4.0}, frozenset({("undeclared", "x")}))
        found = [p for p in points(r) if p.name == "t.gauge"]
        rlmetrics.retract(GROUP, "gauge", prepared)
        after = [p for p in points(r) if p.name == "t.gauge"]
    assert [(p.attributes, p.value) for p in found] == [({"phase": "load"}, 2.0)]
    assert after == []
    assert "must hold (key, value) pairs" in caplog.text
    assert "attribute 'undeclared' is not declared" in caplog.text
