"""``rlmetrics check``: every shipped spec passes, a deliberately bad one from a real installed
test distribution is flagged rule by rule, and each rule on its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_test_dists import install
from tools_support import run_cli

from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.check import ERROR, RULES, Exemption, Finding, check_declared
from rlmetrics.registry import Declared

#: Findings in shipped specs that are real defects awaiting their fix (each names its fix):
#: rlmetrics_gym/startup.py defines _BUCKETS but never passes them (buckets=_BUCKETS).
KNOWN_DEFECTS: set[tuple[str, str]] = set()

BAD_PLUGIN = """
    import rlmetrics
    from rlmetrics import OPEN, Kind, MetricSpec

    rlmetrics.declare("acme.bad", [
        MetricSpec("Acme.Latency", Kind.GAUGE, unit="s", description="mixed case"),
        MetricSpec("acme.step.latency_ms", Kind.HISTOGRAM, unit="ms", buckets=[1, 10],
                   description="unit in the name"),
        MetricSpec("acme.requests_total", Kind.COUNTER, unit="{request}",
                   description="Prometheus suffix on an OTel name"),
        MetricSpec("acme.batch.duration", Kind.HISTOGRAM, unit="s",
                   description="no buckets"),
        MetricSpec("acme.queue.size", Kind.GAUGE, unit="seconds",
                   description="a word for a unit"),
        MetricSpec("acme.tokens", Kind.COUNTER, unit="{token}", description="per request",
                   attributes={"acme.request.id": OPEN, "rlmetrics.run.id": OPEN}),
        MetricSpec("acme.queue", Kind.GAUGE, unit="1", description="a namespace of the above"),
        MetricSpec("acme.queue_depth", Kind.GAUGE, unit="1", description="clashes in Prometheus"),
        MetricSpec("acme.queue.depth", Kind.GAUGE, unit="1", description="with this one"),
        MetricSpec("acme.silent", Kind.GAUGE, unit="1"),
    ])
"""


def _install_bad(site: Path) -> None:
    install(site, "acme-bad-specs", {"acme_bad.py": BAD_PLUGIN}, {"acme_bad": "acme_bad"})


def test_every_shipped_spec_passes() -> None:
    done = run_cli("check", "--json")
    result = json.loads(done.stdout)
    found = {(f["rule"], f["metric"]) for f in result["findings"] if f["severity"] == ERROR}
    assert found == KNOWN_DEFECTS, result["findings"]
    assert done.returncode == (1 if KNOWN_DEFECTS else 0)
    assert result["checked"] >= 90 and set(result["rules"]) == set(RULES)
    # What the specifications fix is exempt, with the reason, not silently passed.
    exempt = {(f["rule"], f["metric"]): f["exempt_because"] for f in result["exempt"]}
    assert "Gym" in exempt[("unit-in-name", "gym.rollout.duration_ms")]
    assert "Gym" in exempt[("total-suffix", "gym.rollout.completed_total")]
    assert "NeMo-RL" in exempt[("unit-in-name", "rl.efficiency.seconds")]


def test_a_bad_spec_from_a_test_plugin_is_flagged(tmp_path: Path) -> None:
    _install_bad(tmp_path)
    done = run_cli("check", "--plugin", "acme-bad-specs", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    findings = {
        tuple(line.split(": ", 4)[2:4]) for line in lines if line.startswith(("error", "warning"))
    }
    expected = {
        ("Acme.Latency", "name"),
        ("acme.step.latency_ms", "unit-in-name"),
        ("acme.requests_total", "total-suffix"),
        ("acme.batch.duration", "histogram-buckets"),
        ("acme.queue.size", "unit"),
        ("acme.tokens [acme.request.id]", "unbounded-attribute"),
        ("acme.tokens [rlmetrics.run.id]", "unbounded-attribute"),
        ("acme.queue", "name"),
        ("acme.queue_depth", "duplicate-name"),
        ("acme.silent", "description"),
    }
    assert expected <= findings, done.stdout
    # One line per finding, naming the plugin (distribution and entry point) and the series;
    # --plugin keeps the others out.
    assert all(
        line.startswith(("error: acme-bad-specs:acme_bad: ", "warning: acme-bad-specs:acme_bad: "))
        for line in lines[:-1]
    )
    assert lines[-1].startswith("10 series checked:")


def test_json_lists_findings_and_a_plugin_that_failed_to_load(tmp_path: Path) -> None:
    install(
        tmp_path,
        "acme-broken",
        {"acme_broken.py": "raise RuntimeError('no')\n"},
        {"acme_broken": "acme_broken"},
    )
    done = run_cli("check", "--plugin", "acme_broken", "--json", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert [(f["rule"], f["plugin"]) for f in result["findings"]] == [
        ("load", "acme-broken:acme_broken")
    ]
    assert "RuntimeError" in result["findings"][0]["message"]


def test_an_unknown_plugin_is_an_error_not_a_pass() -> None:
    done = run_cli("check", "--plugin", "no-such-plugin")
    assert done.returncode == 2 and "no plugin named 'no-such-plugin'" in done.stderr


# -- the rules, in process ----------------------------------------------------------------------


def _check(*specs: MetricSpec, exemptions: tuple[Exemption, ...] = ()) -> list[Finding]:
    declared = [Declared("g", spec, "tests") for spec in specs]
    return list(check_declared(declared, lambda _item: "test:plugin", exemptions).findings)


def _rules(*specs: MetricSpec) -> set[tuple[str, str]]:
    return {(f.rule, f.metric) for f in _check(*specs) if f.rule != "description"}


def test_clean_specs_pass() -> None:
    assert (
        _check(
            MetricSpec("rl.vllm.prompt_tokens", Kind.COUNTER, unit="{token}", description="d"),
            MetricSpec(
                "rl.batch.duration",
                Kind.HISTOGRAM,
                unit="s",
                buckets=[0.1, 1],
                description="d",
                attributes={"host.name": OPEN, "rl.phase": {"a", "b"}},
            ),
            MetricSpec("rl.host.memory.total", Kind.GAUGE, unit="By", description="d"),
            MetricSpec("rl.throughput", Kind.GAUGE, unit="{token}/s", description="d"),
        )
        == []
    )


@pytest.mark.parametrize(
    ("unit", "ok"),
    [
        ("s", True),
        ("ms", True),
        ("By", True),
        ("MiBy", True),
        ("1", True),
        ("%", True),
        ("{token}", True),
        ("{token}/s", True),
        ("By/s", True),
        ("seconds", False),
        ("bytes", False),
        ("count", False),
        ("tokens", False),
        ("s/s/s", False),
    ],
)
def test_units_are_ucum(unit: str, ok: bool) -> None:
    found = _rules(MetricSpec("rl.x", Kind.GAUGE, unit=unit, description="d"))
    assert (("unit", "rl.x") not in found) is ok


def test_a_closed_attribute_is_bounded_whatever_its_name() -> None:
    assert _rules(MetricSpec("rl.x", Kind.GAUGE, attributes={"rl.step": {"a"}})) == set()
    assert _rules(MetricSpec("rl.x", Kind.GAUGE, attributes={"rl.step": OPEN})) == {
        ("unbounded-attribute", "rl.x")
    }


def test_a_gauge_exposed_with_total_is_flagged_but_a_total_segment_is_not() -> None:
    assert _rules(MetricSpec("rl.memory.total", Kind.GAUGE, unit="By")) == set()
    assert _rules(MetricSpec("rl.memory_total", Kind.GAUGE, unit="1")) == {
        ("total-suffix", "rl.memory_total")
    }


def test_an_exemption_moves_a_finding_aside_with_its_reason() -> None:
    spec = MetricSpec(
        "gym.x.duration_ms", Kind.HISTOGRAM, unit="ms", buckets=[1.0], description="d"
    )
    waiver = Exemption("unit-in-name", {"gym.x.duration_ms"}, "the spec fixes it")
    declared = [Declared("g", spec, "tests")]
    result = check_declared(declared, lambda _i: "p", [waiver])
    assert result.findings == ()
    assert [(f.rule, f.exempt_because) for f in result.exempt] == [
        ("unit-in-name", "the spec fixes it")
    ]
    with pytest.raises(ValueError, match="unknown rule"):
        Exemption("no-such-rule", {"x"}, "r")
    with pytest.raises(ValueError, match="say why"):
        Exemption("unit", {"x"}, " ")


_SEGMENT = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@given(st.lists(_SEGMENT, min_size=2, max_size=4))
def test_a_lowercase_dotted_name_passes_the_name_rule(segments: list[str]) -> None:
    spec = MetricSpec(".".join(segments), Kind.GAUGE, description="d")
    assert not [f for f in _check(spec) if f.rule == "name"]


@given(st.lists(_SEGMENT, min_size=2, max_size=4), st.integers(0, 3))
def test_an_uppercase_letter_fails_the_name_rule(segments: list[str], index: int) -> None:
    index %= len(segments)
    segments[index] = segments[index][0].upper() + segments[index][1:]
    spec = MetricSpec(".".join(segments), Kind.GAUGE, description="d")
    assert [f.rule for f in _check(spec) if f.rule == "name"] == ["name"]


def test_an_attribute_scoped_exemption_covers_only_that_attribute() -> None:
    spec = MetricSpec(
        "gym.x.requests",
        Kind.COUNTER,
        unit="{request}",
        description="d",
        attributes={"gym.x.request.id": OPEN, "gym.x.trace.id": OPEN},
    )
    waiver = Exemption(
        "unbounded-attribute", {"gym.x.requests"}, "the spec fixes it", attribute="gym.x.request.id"
    )
    result = check_declared([Declared("g", spec, "tests")], lambda _i: "p", [waiver])
    assert [(f.rule, f.attribute) for f in result.exempt] == [
        ("unbounded-attribute", "gym.x.request.id")
    ]
    assert [(f.rule, f.attribute) for f in result.findings] == [
        ("unbounded-attribute", "gym.x.trace.id")
    ]


CLEAN_PLUGIN = """
    import rlmetrics
    from rlmetrics import Kind, MetricSpec

    rlmetrics.declare("acme.clean", [
        MetricSpec("acme.queue.depth", Kind.GAUGE, unit="{item}", description="Items queued."),
    ])
"""


def test_check_of_one_plugin_ignores_another_plugins_load_failure(tmp_path: Path) -> None:
    install(tmp_path, "acme-clean", {"acme_clean.py": CLEAN_PLUGIN}, {"acme_clean": "acme_clean"})
    install(
        tmp_path,
        "acme-broken",
        {"acme_broken.py": "raise RuntimeError('no')\n"},
        {"acme_broken": "acme_broken"},
    )
    env = {"PYTHONPATH": str(tmp_path)}
    done = run_cli("check", "--plugin", "acme-clean", "--json", env=env)
    result = json.loads(done.stdout)
    assert (done.returncode, result["findings"]) == (0, []), done.stdout
    assert result["checked"] == 1
    # The whole check still fails on it: the failure is ignored only when not asked about.
    everything = run_cli("check", "--json", env=env)
    loads = [f["plugin"] for f in json.loads(everything.stdout)["findings"] if f["rule"] == "load"]
    assert (everything.returncode, loads) == (1, ["acme-broken:acme_broken"])


def test_a_name_of_the_proposed_rl_conventions_is_reserved() -> None:
    """Both namespaces (docs/conventions.md): a series may not take a name the RL proposal
    defines, nor sit under one; rlmetrics' own rl.* names beside them pass."""
    gauge = Kind.GAUGE
    assert _rules(
        MetricSpec("rl.train.loss", gauge, unit="1"),
        MetricSpec("rl.environment.reward.mean.policy", gauge, unit="1"),
        MetricSpec("rl.reward.mean", gauge, unit="1"),
        MetricSpec("rl.train.loss_scale", gauge, unit="1"),
    ) == {
        ("rl-proposal", "rl.train.loss"),
        ("rl-proposal", "rl.environment.reward.mean.policy"),
    }


PROPOSAL_NAME = """
import rlmetrics
from rlmetrics import Kind, MetricSpec

rlmetrics.declare("acme", [
    MetricSpec("rl.train.mfu", Kind.GAUGE, unit="1", description="the proposal's name"),
])
"""
PROFILE_SERIES = """
import rlmetrics
from rlmetrics import Kind, MetricSpec

rlmetrics.declare("acme", [
    MetricSpec("rl.sample.duration", Kind.HISTOGRAM, unit="s", buckets=[1, 2],
               description="the profile's histogram, declared again"),
])
"""


def test_a_plugin_cannot_collide_with_the_profiles_series_or_the_proposals(
    tmp_path: Path,
) -> None:
    install(tmp_path, "acme-rl", {"acme_rl.py": PROPOSAL_NAME}, {"acme_rl": "acme_rl"})
    install(
        tmp_path, "acme-sample", {"acme_sample.py": PROFILE_SERIES}, {"acme_sample": "acme_sample"}
    )
    done = run_cli("check", "--json", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    found = {(f["rule"], f["plugin"]): f["message"] for f in json.loads(done.stdout)["findings"]}
    assert "#88" in found[("rl-proposal", "acme-rl:acme_rl")]
    # The profile's own histograms are rlmetrics' declarations: declaring one again fails the
    # plugin's import, loudly, naming the series.
    assert "rl.sample.duration" in found[("load", "acme-sample:acme_sample")]
