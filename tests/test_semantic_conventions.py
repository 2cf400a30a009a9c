"""Every ``gen_ai.*`` and ``hw.gpu.*`` series the installed distributions declare, held to the
``opentelemetry-semantic-conventions`` package pinned beside the SDK: where the package has a
metric of that name, the instrument and unit it creates; where it has an attribute, the key;
where it has the attribute's values (an enum), the declared values among them.

What the package does not have yet (the GenAI conventions moved to their own repository, whose
newer names are not in the package) is listed by name here, so a package that gains one checks
it from then on.
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.semconv import _incubating, attributes

from rlmetrics.plugins import load_plugins
from rlmetrics.registry import Declared, default_registry
from rlmetrics.spec import Kind

NAMESPACES = ("gen_ai.", "hw.gpu.")

#: Checked whenever they are declared: the test cannot pass by finding nothing.
MUST_CHECK = {
    "gen_ai.client.token.usage",
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
    "hw.gpu.memory.utilization",
}

#: Names and keys rlmetrics declares that the package does not define (yet), and why.
NOT_IN_PACKAGE = {
    "gen_ai.client.inference.usage.input_tokens": "semantic-conventions-genai PR #374",
    "gen_ai.client.inference.usage.output_tokens": "semantic-conventions-genai PR #374",
    "gen_ai.client.inference.operation.input_tokens": "semantic-conventions-genai PR #374",
    "gen_ai.client.inference.operation.output_tokens": "semantic-conventions-genai PR #374",
    "gen_ai.token.modality": "semantic-conventions-genai PR #374",
    "gen_ai.execute_tool.duration": "rlmetrics-gym's own (no GenAI metric for a tool call)",
    "gen_ai.invoke_agent.duration": "rlmetrics-gym's own (no GenAI metric for an agent call)",
}


def _modules(package: ModuleType, sub: str) -> Iterator[ModuleType]:
    """Every module of ``package.sub`` (``metrics`` or ``attributes``), stable and incubating."""
    root = importlib.import_module(f"{package.__name__}.{sub}") if sub else package
    for info in pkgutil.iter_modules(root.__path__):
        yield importlib.import_module(f"{root.__name__}.{info.name}")


def _constants(modules: list[ModuleType]) -> dict[str, tuple[ModuleType, str]]:
    """``{value: (module, CONSTANT)}`` of every string constant; the incubating module wins
    (it is a superset, and the stable one has no ``create_*`` functions for metrics)."""
    found: dict[str, tuple[ModuleType, str]] = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and "." in value:
                found.setdefault(value, (module, name))
    return found


METRICS = _constants(list(_modules(_incubating, "metrics")))
ATTRIBUTES = _constants([*_modules(_incubating, "attributes"), *_modules(attributes, "")])


def _declared() -> list[Declared]:
    load_plugins(quiet=True)
    return [d for d in default_registry().declared() if d.spec.name.startswith(NAMESPACES)]


def _family(kind_or_class: str) -> str:
    """``counter``, ``updowncounter``, ``histogram`` or ``gauge``: synchronous or not is the
    implementation's choice, the conventions fix only this."""
    plain = kind_or_class.lower().lstrip("_").replace("_", "")
    return plain.removeprefix("observable")


def _created(module: ModuleType, constant: str) -> Any:
    """The instrument the package's ``create_*`` function makes on a real SDK meter."""
    create = getattr(module, f"create_{constant.lower()}")
    meter = MeterProvider().get_meter("rlmetrics-conventions-test")
    try:
        return create(meter, None)  # observable instruments take their callbacks
    except TypeError:
        return create(meter)


def _values_enum(module: ModuleType, constant: str) -> type[enum.Enum] | None:
    camel = "".join(part.capitalize() for part in constant.lower().split("_"))
    found = getattr(module, f"{camel}Values", None)
    return found if isinstance(found, type) and issubclass(found, enum.Enum) else None


def test_the_checked_families_are_installed() -> None:
    names = {d.spec.name for d in _declared()}
    assert names >= MUST_CHECK, f"not declared here: {sorted(MUST_CHECK - names)}"


@pytest.mark.parametrize("declared", _declared(), ids=lambda d: d.spec.name)
def test_name_instrument_and_unit_match_the_package(declared: Declared) -> None:
    spec = declared.spec
    if spec.name not in METRICS:
        assert spec.name not in MUST_CHECK
        assert spec.name in NOT_IN_PACKAGE, (
            f"{spec.name} ({declared.owner}) is neither a metric of "
            "opentelemetry-semantic-conventions nor listed in NOT_IN_PACKAGE"
        )
        return
    module, constant = METRICS[spec.name]
    instrument = _created(module, constant)
    assert instrument.name == spec.name
    assert spec.unit == instrument.unit, f"{spec.name}: the conventions' unit is {instrument.unit}"
    assert _family(spec.kind.value) == _family(type(instrument).__name__), (
        f"{spec.name}: declared {spec.kind.value}, the conventions create "
        f"{type(instrument).__name__}"
    )


@pytest.mark.parametrize("declared", _declared(), ids=lambda d: d.spec.name)
def test_attribute_keys_and_values_match_the_package(declared: Declared) -> None:
    for key, values in declared.spec.attributes:
        if key not in ATTRIBUTES:
            assert key in NOT_IN_PACKAGE, (
                f"{declared.spec.name}: attribute {key} is not in "
                "opentelemetry-semantic-conventions nor listed in NOT_IN_PACKAGE"
            )
            continue
        module, constant = ATTRIBUTES[key]
        allowed = _values_enum(module, constant)
        if values is None or allowed is None:
            continue
        known = {member.value for member in allowed}
        assert set(values) <= known, (
            f"{declared.spec.name}: {key} values {sorted(set(values) - known)} are not among "
            f"the conventions' {sorted(known)}"
        )


def test_the_family_of_every_kind_is_one_the_package_uses() -> None:
    # A new Kind must map onto an instrument family, or the comparison above means nothing.
    assert {_family(kind.value) for kind in Kind} == {
        "counter",
        "updowncounter",
        "histogram",
        "gauge",
    }
