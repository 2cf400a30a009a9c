"""Reading host memory from a node's exposition: Ray 2.60's real one and readings derived
from it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from ray_support import EXPOSITION, render_exposition
from rlmetrics_ray.exposition import (
    MEMORY_FAMILIES,
    SOURCE_CGROUP,
    SOURCE_HOST,
    TOTAL_FAMILY,
    TOTAL_HOST_FAMILY,
    USED_FAMILY,
    USED_HOST_FAMILY,
    MemoryReading,
    memory_lines,
    read_memory,
)

GiB = 1024**3


def test_the_family_names_are_in_rays_real_exposition() -> None:
    families = {f.name: f for f in text_string_to_metric_families(EXPOSITION)}
    for name in MEMORY_FAMILIES:
        assert name in families, f"{name} is not in Ray 2.60's node exposition"
        assert families[name].type == "gauge"
        (sample,) = families[name].samples
        assert {"ip", "SessionName", "IsHeadNode", "RayNodeType", "Version"} <= set(sample.labels)


def test_the_real_exposition_reads_as_the_host_pair() -> None:
    families = {f.name: f for f in text_string_to_metric_families(EXPOSITION)}
    expected = MemoryReading(
        used=families[USED_HOST_FAMILY].samples[0].value,
        total=families[TOTAL_HOST_FAMILY].samples[0].value,
        source=SOURCE_HOST,
    )
    assert read_memory(EXPOSITION, ip="127.0.0.1") == expected
    assert 0 < expected.used < expected.total  # type: ignore[operator]


def test_memory_lines_keep_exactly_the_four_families() -> None:
    kept = memory_lines(EXPOSITION)
    families = {f.name: f for f in text_string_to_metric_families(kept)}
    assert set(families) == set(MEMORY_FAMILIES)
    # The rest of the node's exposition (~800 lines) never reaches the parser.
    assert len(kept.splitlines()) == 3 * len(MEMORY_FAMILIES)
    full = {f.name: f.samples for f in text_string_to_metric_families(EXPOSITION)}
    assert {name: family.samples for name, family in families.items()} == {
        name: full[name] for name in MEMORY_FAMILIES
    }


def test_the_host_pair_is_preferred_over_the_cgroup_pair() -> None:
    text = render_exposition(used=1 * GiB, total=4 * GiB, used_host=3 * GiB, total_host=16 * GiB)
    assert read_memory(text) == MemoryReading(3 * GiB, 16 * GiB, SOURCE_HOST)


def test_without_host_series_the_cgroup_pair_is_read() -> None:
    # What Ray releases before the *_host series serve.
    text = render_exposition(used=1 * GiB, total=4 * GiB)
    assert read_memory(text) == MemoryReading(1 * GiB, 4 * GiB, SOURCE_CGROUP)


def test_a_complete_pair_wins_over_a_partial_one() -> None:
    text = render_exposition(used=1 * GiB, total=4 * GiB, used_host=3 * GiB)
    assert read_memory(text) == MemoryReading(1 * GiB, 4 * GiB, SOURCE_CGROUP)


def test_a_partial_pair_is_still_read_when_nothing_is_complete() -> None:
    assert read_memory(render_exposition(total_host=16 * GiB)) == MemoryReading(
        None, 16 * GiB, SOURCE_HOST
    )
    assert read_memory(render_exposition(used=2 * GiB)) == MemoryReading(
        2 * GiB, None, SOURCE_CGROUP
    )


def test_no_memory_family_reads_as_none() -> None:
    assert read_memory(render_exposition()) is None
    assert read_memory("") is None


# "9" * 400 parses as an int past float's range (math.isfinite raised on it: the host's
# whole reading was lost).
@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-1.0", "9" * 400])
def test_a_value_that_is_not_a_byte_count_is_not_used(bad: str) -> None:
    text = render_exposition(used=1 * GiB, total=4 * GiB, used_host=3 * GiB, total_host=16 * GiB)
    text = text.replace(f"{float(3 * GiB)!r}", bad)
    # used_host unusable: the complete cgroup pair is read instead.
    assert read_memory(text) == MemoryReading(1 * GiB, 4 * GiB, SOURCE_CGROUP)


def test_the_sample_of_the_nodes_own_ip_wins() -> None:
    own = render_exposition(used_host=3 * GiB, total_host=16 * GiB, ip="10.0.0.2")
    other = render_exposition(used_host=5 * GiB, total_host=32 * GiB, ip="10.0.0.9")
    text = memory_lines(other) + memory_lines(own).replace("# HELP", "#").replace("# TYPE", "#")
    assert read_memory(text, ip="10.0.0.2") == MemoryReading(3 * GiB, 16 * GiB, SOURCE_HOST)
    assert read_memory(text, ip="10.0.0.9") == MemoryReading(5 * GiB, 32 * GiB, SOURCE_HOST)
    assert read_memory(text, ip=None) == MemoryReading(5 * GiB, 32 * GiB, SOURCE_HOST)


def test_a_family_named_like_a_memory_family_is_not_taken_for_it() -> None:
    text = (
        "# TYPE ray_node_mem_used_hostile gauge\nray_node_mem_used_hostile 1.0\n"
        "# TYPE ray_node_mem_total_bytes gauge\nray_node_mem_total_bytes 2.0\n"
    )
    assert memory_lines(text) == ""
    assert read_memory(text) is None


def test_broken_memory_lines_raise_value_error() -> None:
    with pytest.raises(ValueError):
        read_memory('ray_node_mem_used{ip="1.2.3.4" 12\n')


# -- properties ------------------------------------------------------------------------------

byte_counts = st.one_of(st.none(), st.integers(min_value=0, max_value=2**52).map(float))


@settings(max_examples=60)
@given(used=byte_counts, total=byte_counts, used_host=byte_counts, total_host=byte_counts)
def test_any_combination_of_families_reads_back_by_the_preference_rule(
    used: float | None, total: float | None, used_host: float | None, total_host: float | None
) -> None:
    reading = read_memory(render_exposition(used, total, used_host, total_host))
    pairs = [(SOURCE_HOST, used_host, total_host), (SOURCE_CGROUP, used, total)]
    complete = [p for p in pairs if p[1] is not None and p[2] is not None]
    partial = [p for p in pairs if p[1] is not None or p[2] is not None]
    chosen = (complete or partial or [None])[0]
    if chosen is None:
        assert reading is None
    else:
        assert reading == MemoryReading(chosen[1], chosen[2], chosen[0])


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.sampled_from(
                [
                    f"{USED_FAMILY} 1",
                    f'{TOTAL_FAMILY}{{ip="x"}} 2',
                    f"# HELP {USED_HOST_FAMILY} help",
                    f"# TYPE {TOTAL_HOST_FAMILY} gauge",
                    "ray_node_mem_usedx 3",
                    "xray_node_mem_used 3",
                    "ray_node_mem_",
                ]
            ),
        ),
        max_size=12,
    )
)
def test_memory_lines_keep_whole_lines_of_the_four_families_only(lines: list[str]) -> None:
    text = "\n".join(lines)
    kept = memory_lines(text).split("\n")[:-1]
    names = sorted(MEMORY_FAMILIES)
    expected = [
        line
        for line in text.split("\n")
        if any(
            line.removeprefix(prefix).startswith((f"{name}{{", f"{name} "))
            for name in names
            for prefix in ("", "# HELP ", "# TYPE ")
            if line.startswith(prefix)
        )
    ]
    assert kept == [line for line in expected if line]
    try:
        reading = read_memory(text)
    except ValueError:
        return  # the memory lines themselves did not parse: the caller reports it
    if reading is not None:
        assert reading.source in (SOURCE_HOST, SOURCE_CGROUP)
        for value in (reading.used, reading.total):
            assert value is None or (math.isfinite(value) and value >= 0)
