"""Binding declared specs to OpenTelemetry instruments, for one telemetry session.

A :class:`Session` exists only while telemetry is started: it holds one instrument per spec.
The :class:`Recorder` (the registry's recording half, whose methods ``rlmetrics.record`` and
its siblings are) writes into it. Recording is the training loop's path, so it never raises:
every bad value, key or attribute set is dropped on its own with ``warn_once`` while the rest
of the call lands.

Gauges are not exported through the SDK's synchronous gauge: SDK 1.44 forgets its value after
each collection and 1.45 keeps every attribute set forever. A gauge keeps the last value per
attribute set here, and every collection of every reader adds the table's points to what the
SDK collected (:meth:`Session.gauge_points`, which ``_providers`` makes into the SDK's metric
data: the OpenTelemetry specification's metric producer, which the Python SDK has no parameter
for). Every SDK version exports the same series, ``retract`` can end one, and a collection
costs a gauge's point no measurement, exemplar check or aggregation: an observable gauge made
the SDK do all three for each point at each collection, 1.8-2.5x the collection of the same
points set on synchronous gauges.

A series with an open attribute admits ``max_series`` distinct attribute sets; every later one
is recorded under one overflow set, ``{"otel.metric.overflow": True}``, as SDK 1.45.2 does past
its own limit (and SDK 1.44 never does): a counter's sum over its attributes stays whole, a
gauge's overflow point holds the last value past the cap, and the export says that sets were
folded. Admitted sets are found before the cap is looked at, so the check costs a point of an
admitted set nothing.

A counter's or up-down counter's points are added up here between two collections when no
OpenTelemetry context is active on the recording thread, and handed to the SDK in one call per
attribute set when it collects (a callback of :meth:`Session._flush_sums`, which the SDK runs
before it reads any synchronous instrument). The SDK's own ``add`` costs 4-8 µs a call, most
of it finding the attribute set's stream again (SDK 1.45 hashes the attributes afresh every
call); the sum the collection exports is the same. What this gives up is nothing a user could
see: an exemplar ties a point to the span it was recorded in, and with no active context the
SDK's default (trace-based) exemplar filter keeps none. A point recorded inside a span goes
straight to the SDK, exemplar and all; with ``OTEL_METRICS_EXEMPLAR_FILTER=always_on`` every
point does. The first point of each attribute set also goes straight to the SDK, so its
stream starts when the series does.

A histogram's values are held the same way: a value recorded outside every span is appended
to its attribute set's ``array`` and recorded into the SDK's histogram, value by value and in
the order they came, by the same callback at the next collection. The SDK's ``record`` costs
about 4 µs a call on SDK 1.44 and 5-10 µs on 1.45, most of it finding the attribute set's
stream again; the collecting thread (the periodic reader's, not the loop's) now pays it.
The exported point is the same: count, sum (the same additions in the same order), buckets,
min and max; an int stays an int (an attribute set's values are held as ``array('q')`` or
``array('d')``, and a value of the other type hands over what is held first). A value
recorded inside a span goes straight to the SDK with its context, for its exemplar, after
what its attribute set holds; so does every value under ``always_on``, and every value
recorded while an ``rlmetrics.step`` is open (its span is the current context). What is held
is bounded: at :data:`HELD_VALUES_MAX` values of one attribute set the recording thread hands
them over itself (the cost it paid before, amortised), so nothing is dropped and memory stays
within 32 KiB per attribute set. The provider's shutdown collects once more, and that
collection takes what is held.

A point the loop writes straight to the SDK (a histogram's, a counter's inside a span) is
handed the current context rather than left to the SDK to look up: the SDK's own lookup is two
Python calls, the context variable's ``get`` is one C call. Outside every span the current
context is empty, and the SDK would look an empty (falsy) context up again, so the point gets a
context that holds one private key and no span instead. The SDK reads a point's context for one
thing, its exemplar's span, and finds none in either.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._warn import describe_key, describe_value, warn_once
from .spec import Kind, MetricSpec
from .values import (
    INT64_MAX,
    INT64_MIN,
    Attributes,
    AttributeSet,
    as_number,
    as_real,
    attribute_set,
    check_attributes,
    encodable,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from .last_value import LastValue
    from .registry import Declared

__all__ = ["HELD_VALUES_MAX", "OVERFLOW_ATTRIBUTE", "OVERFLOW_ATTRIBUTES", "Recorder", "Session"]

_NO_KEY: AttributeSet = frozenset()
#: The attribute set every point past a series' ``max_series`` is recorded under: the SDK's
#: own overflow attribute, with its value (a bool, where rlmetrics' own values are strings).
OVERFLOW_ATTRIBUTE = "otel.metric.overflow"
OVERFLOW_ATTRIBUTES: dict[str, Any] = {OVERFLOW_ATTRIBUTE: True}
_OVERFLOW_KEY: AttributeSet = frozenset(OVERFLOW_ATTRIBUTES.items())  # type: ignore[arg-type]
#: Validated attribute sets remembered per series (several times any sane max_series).
_MAX_VALID = 4096
_MISSING: Any = object()
#: Histogram values held for one attribute set between two collections (see the module's
#: docstring): at this many the recording thread hands them to the SDK itself. 4096 values
#: are 32 KiB of ``array`` per attribute set (a series has at most ``max_series``); handing
#: them over costs the loop 4096 SDK calls at once (about 16 ms on SDK 1.44, 40 ms on 1.45 on
#: a shared 2-core host), what it paid for them one by one before. A loop that records fewer
#: than this many values of an attribute set per export interval (10 s by default: 400 a
#: second) never pays it; a smaller cap would make that pause shorter and more frequent.
HELD_VALUES_MAX = 4096


class _Observing(threading.local):
    """Whether this thread runs a family's observable callback, inside a collection: a point
    it records then goes straight to the SDK, held or summed it would wait for the next
    collection (the SDK may run the callback after the one that hands held values over),
    and miss the one that exports what the callback reported beside it."""

    active = False


_observing = _Observing()


#: Called with ``(series name, cause)`` for each point the checked path drops (the cause one of
#: :func:`_drop_cause`'s words: ``nan``, ``infinite``, ``negative``...); the pipeline family
#: sets it, so a NaN loss, which its own series cannot show, is counted where alerts see it.
drop_listener: Callable[[str, str], None] | None = None


def _not_finite(value: Any) -> str:
    return f"{describe_value(value)} is not a finite number"


_BEYOND_INT64 = "an int beyond the int64 range an exporter can encode"


#: The ``(logged key, key read)`` pairs of the dict the plugins are reading on this thread,
#: when its keys carry their prefix (:func:`rlmetrics.routing.split`): a value dropped is
#: said by the key as logged. Read on the warning path only.
logged_keys = threading.local()


def _drop_cause(value: Any, reason: str) -> str:
    """Which cause a dropped point is, for its warn-once key: one of a few words, so a key
    warns once per cause (a string, then a None, then a NaN each say so) and the keys stay
    bounded. Off the hot path: only a dropped point gets here."""
    if value is None:
        return "none"
    if reason.endswith("is not a finite number"):
        try:
            number = as_real(value)
            if number is None:
                return "not-a-number"
            return "nan" if number != number else "infinite"
        except Exception:  # a value whose comparison raises
            return "not-a-number"
    if reason == _BEYOND_INT64:
        return "int64"
    if "negative" in reason:
        return "negative"
    return "attributes"


def _record_failed(group: Any) -> None:
    warn_once(
        f"record:{describe_key(group)}",
        f"rlmetrics.record({describe_key(group)}) failed; values dropped",
    )


def _no_group(group: Any) -> None:
    warn_once(
        f"record:{describe_key(group)}:group",
        f"rlmetrics.record: no metric group {describe_key(group)} is declared; declare "
        "its specs before rlmetrics.start()",
    )


def _unknown(group: str, key: Any, series_by_key: Mapping[str, Any] | None = None) -> None:
    # A series' name given for its key (``acme.queue.depth`` for ``acme/queue_depth``) says
    # the key to record by.
    named = next(
        (k for k, s in (series_by_key or {}).items() if s.spec.name == key and k != key), None
    )
    hint = (
        ""
        if named is None
        else f" (it is the name of the series whose key is {named!r}: record {{{named!r}: value}})"
    )
    warn_once(
        f"record:{group}:unknown-key",
        f"rlmetrics.record: {describe_key(key)} is not a declared key of group {group!r}"
        f"{hint}; dropped (later unknown keys of this group are reported at DEBUG)",
    )


class _Series:
    """One spec's live state for a telemetry session.

    A recorded series' instrument is created on its first point, not at start: a series
    that is never recorded costs no collection. Admitted attribute sets map to the copy of
    the attributes the SDK gets (copied once, so a caller reusing its dict cannot change an
    exported point). A gauge's last-value table is written without a lock: a dict assignment
    and an attribute store are atomic, and the collection reads it with one C-level copy.
    """

    __slots__ = (
        "admitted",
        "capped",
        "declared",
        "defer",
        "deferrable",
        "direct",
        "flush_lock",
        "gauge",
        "held",
        "holds",
        "instrument",
        "least",
        "lock",
        "nonnegative",
        "observable",
        "pend",
        "pending",
        "plain",
        "recordable",
        "spec",
        "sum_lock",
        "sums",
        "table",
        "valid",
        "write",
    )

    def __init__(self, declared: Declared) -> None:
        self.declared = declared
        self.spec = declared.spec
        # Read on every record: precomputed rather than derived from the kind each time.
        self.observable = self.spec.kind.observable
        # A counter's or histogram's value cannot be negative: the SDK would drop it too, but
        # with a warning on every call.
        self.nonnegative = self.spec.kind.monotonic or self.spec.kind is Kind.HISTOGRAM
        # The least value the loop's fast paths pass (one float comparison, not two tests).
        self.least = 0.0 if self.nonnegative else -math.inf
        self.gauge = self.spec.kind is Kind.GAUGE
        # Whether the SDK adds up a collection's observations of one attribute set (a counter
        # or up-down counter) rather than keeping the last one (a gauge).
        self.sums = self.spec.kind in (Kind.OBSERVABLE_COUNTER, Kind.OBSERVABLE_UP_DOWN_COUNTER)
        # Only a spec with an open attribute has a max_series cap to enforce.
        self.capped = self.spec.open_attributes
        self.admitted: dict[AttributeSet, dict[str, str | int]] = {}
        # Attribute sets already checked against the declaration: an observable callback
        # yields the same sets every collection, and checking is most of its cost.
        self.valid: dict[AttributeSet, tuple[AttributeSet, dict[str, str | int]]] = {}
        # A gauge's last value per attribute set, kept as the observation the collection
        # returns and overwritten in place (:mod:`rlmetrics.last_value`).
        self.table: dict[AttributeSet, LastValue] = {}
        self.lock = threading.Lock()
        # A synchronous counter or up-down counter: its points may be added up here until the
        # next collection (see the module's docstring). ``defer`` once the unlabelled point's
        # stream exists; ``plain`` is its sum so far, ``pending`` each labelled attribute
        # set's ``[sum, attributes]``, all under ``sum_lock``.
        self.deferrable = self.spec.kind in (Kind.COUNTER, Kind.UP_DOWN_COUNTER)
        self.defer = False
        self.plain: int | float = 0
        self.pending: dict[AttributeSet, list[Any]] = {}
        self.sum_lock = threading.Lock()
        # A histogram: its values outside every span are held here until the next collection
        # (see the module's docstring), per attribute set ``[values, attributes]`` (values an
        # ``array``), under ``sum_lock``. ``flush_lock`` is held while held values go to the
        # SDK, so a value written straight to it never overtakes them; re-entrant, because
        # the SDK's calls during a hand-over may run the GC, whose callbacks may record.
        self.holds = self.spec.kind is Kind.HISTOGRAM
        self.held: dict[AttributeSet, list[Any]] = {}
        self.flush_lock = threading.RLock()
        # Where a point that is not written straight goes: ``Session._sum`` or ``_hold``.
        self.pend: Callable[[_Series, int | float, AttributeSet, Any], None] | None = None
        self.instrument: Any = None
        self.write: Callable[..., None] | None = None
        # Recordable and bound: a point can go straight to its instrument or table.
        self.recordable = False
        # A point goes straight to ``write`` (not a gauge's table, not a deferred sum).
        self.direct = False

    def point(
        self, value: Any, attributes: Any, admitted: dict[AttributeSet, dict[str, str | int]]
    ) -> tuple[int | float, AttributeSet, dict[str, str | int] | None] | str:
        """``(number, attribute key, attributes)`` for an exportable point, else why not.

        ``admitted`` holds the attribute sets already counted against the spec's
        ``max_series`` cap: the session's for a recorded series, one collection's for an
        observed one.
        """
        kind = type(value)
        if kind is float:  # the hot path: finite unless x - x is not 0 (NaN, ±inf)
            if value - value != 0:
                return _not_finite(value)
            number: int | float = value
        elif kind is int:
            if not INT64_MIN <= value <= INT64_MAX:
                return _BEYOND_INT64
            number = value
        else:
            converted = as_number(value)
            if converted is None:
                return _not_finite(value)
            if not encodable(converted):
                return _BEYOND_INT64
            number = converted
        if self.nonnegative and number < 0:
            return f"a {self.spec.kind.value} cannot take a negative value"
        if not attributes:
            return number, _NO_KEY, None
        try:
            # A frozenset of (key, value) pairs is an attribute set prepared once by its caller.
            key = attribute_set(attributes)
        except (AttributeError, TypeError):
            return f"attributes must be a mapping of str to str, got {type(attributes).__name__}"
        known = admitted.get(key, _MISSING)
        if known is not _MISSING:
            return number, key, known
        checked = self.valid.get(key)
        if checked is None:
            mapping = attributes
            if attributes is key:
                try:
                    mapping = dict(key)
                except (TypeError, ValueError):
                    return "an attribute set must hold (key, value) pairs"
            problem = check_attributes(self.spec, mapping)
            if isinstance(problem, str):
                return problem
            if len(self.valid) >= _MAX_VALID:
                self.valid.clear()  # a callback whose attribute sets churn: start over
            self.valid[key] = checked = problem
        with self.lock:
            if self.capped and len(admitted) >= self.spec.max_series:
                self._overflowed()
                return number, _OVERFLOW_KEY, OVERFLOW_ATTRIBUTES
            admitted[key] = checked[1]
        return (number, *checked)

    def _overflowed(self) -> None:
        spec = self.spec
        warn_once(
            f"overflow:{spec.name}",
            f"rlmetrics: {spec.name!r} has more than max_series={spec.max_series} distinct "
            f"attribute sets; later ones are recorded under {OVERFLOW_ATTRIBUTE}=true (one set "
            "for all of them, as the OpenTelemetry SDK does; raise max_series or bound the "
            "attribute's values)",
        )

    def retract(self, key: AttributeSet) -> None:
        self.table.pop(key, None)
        with self.lock:
            self.admitted.pop(key, None)


class Session:
    """Instruments built on one Meter; exists only while telemetry is started."""

    def __init__(
        self,
        declared: Iterable[Declared],
        meter: Meter,
        bound_now: Callable[[str], bool] = lambda _group: True,
    ) -> None:
        from opentelemetry.context import Context, get_current
        from opentelemetry.metrics import Observation

        from .last_value import LastValue

        self._observation = Observation
        self._meter = meter
        self.active = True
        self.groups: dict[str, dict[str, _Series]] = {}
        #: OpenTelemetry's current context (empty, so falsy, outside every span), read in
        #: one C call where the API's ``get_current`` makes two Python calls.
        self.context = _current_context()
        #: The context handed to the SDK with a point recorded outside every span: one with
        #: no span in it, as the empty current context has none, but not empty, for the SDK
        #: looks an empty (falsy) context up again. The SDK reads a point's context only
        #: for its exemplar's span.
        self.outside_spans = Context({"rlmetrics.outside_spans": True})
        #: ``self.context``, or None where sums are never deferred: not with the
        #: ``always_on`` exemplar filter (every point is an exemplar), nor under a runtime
        #: context other than the default contextvars one.
        exemplar_filter = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "")
        self.in_context = (
            None
            if self.context is get_current or exemplar_filter.strip().lower() == "always_on"
            else self.context
        )
        #: A gauge's last value for one attribute set (its table's entry).
        self.last_value: Callable[[int | float, Any], LastValue] = LastValue
        #: The gauges bound so far, whose tables every collection reads.
        self.gauges: list[_Series] = []
        self._deferring: tuple[_Series, ...] = ()
        self._holding: tuple[_Series, ...] = ()
        self._deferring_lock = threading.Lock()
        summable = False
        for item in declared:
            series = _Series(item)
            self.groups.setdefault(item.group, {})[item.spec.key] = series
            summable = summable or series.deferrable or series.holds
            # A callback may have points from the start, unless its family waits to be used.
            if series.observable and bound_now(item.group):
                self._bind(series)
        if summable and self.in_context is not None:
            # Created here, never on a recording thread: creating an observable instrument
            # waits for the SDK's collection lock, which a callback that records holds.
            meter.create_observable_gauge(
                "rlmetrics.pending_sums",
                description="Never exported: hands counters' deferred sums and histograms' "
                "held values to the SDK",
                callbacks=[self._flush_sums],
            )

    def activate(self, group: str) -> None:
        """Create ``group``'s observable instruments (the process now uses the family)."""
        for series in self.groups.get(group, {}).values():
            if series.observable:
                self._bind(series)

    def _bind(self, series: _Series) -> None:
        """Create the series' instrument (once; a recorded series on its first point)."""
        with series.lock:
            if series.instrument is not None:
                return
            spec, meter = series.spec, self._meter
            common: dict[str, Any] = {
                "name": spec.name,
                "unit": spec.unit,
                "description": spec.description,
            }
            instrument: Any
            if spec.kind is Kind.COUNTER:
                instrument = meter.create_counter(**common)
                series.write = instrument.add
            elif spec.kind is Kind.UP_DOWN_COUNTER:
                instrument = meter.create_up_down_counter(**common)
                series.write = instrument.add
            elif spec.kind is Kind.HISTOGRAM:
                if spec.buckets is not None:
                    common["explicit_bucket_boundaries_advisory"] = list(spec.buckets)
                instrument = meter.create_histogram(**common)
                series.write = instrument.record
            elif spec.kind is Kind.GAUGE:
                # No SDK instrument: the collection reads the table (gauge_points).
                instrument = series.table
                self.gauges.append(series)
            else:
                create = {
                    Kind.OBSERVABLE_GAUGE: meter.create_observable_gauge,
                    Kind.OBSERVABLE_COUNTER: meter.create_observable_counter,
                    Kind.OBSERVABLE_UP_DOWN_COUNTER: meter.create_observable_up_down_counter,
                }[spec.kind]
                instrument = create(callbacks=[self._callback(series)], **common)
            series.instrument = instrument
            series.direct = not series.gauge and not (
                (series.deferrable or series.holds) and self.in_context is not None
            )
            series.pend = self._hold if series.holds else self._sum
            series.recordable = not series.observable

    # -- the checked path (every point the recorder's loop does not write itself) -----------

    def write(self, series: _Series, group: str, key: str, value: Any, attributes: Any) -> None:
        """Check one point against its series and write it, or drop it with a warning."""
        if series.observable:
            warn_once(
                f"record:{group}:{key}:observable",
                f"rlmetrics.record: {series.spec.name!r} is a {series.spec.kind.value}, "
                "exported through its callback; not recordable",
            )
            return
        point = series.point(value, attributes, series.admitted)
        if isinstance(point, str):
            cause = _drop_cause(value, point)
            # The key as the user logged it: train/reward, read by the family as reward.
            key = next((k for k, rest in getattr(logged_keys, "pairs", ()) if rest == key), key)
            warn_once(
                f"record:{group}:{key}:dropped:{cause}",
                f"rlmetrics.record: {series.spec.name} (key {key!r}) dropped a value: {point}",
            )
            listener = drop_listener
            if listener is not None:
                try:
                    listener(series.spec.name, cause)
                except Exception:  # counting a drop must not fail the call that dropped it
                    warn_once("record:drop-listener", "rlmetrics: counting a dropped value failed")
            return
        number, attr_key, attr_dict = point
        if series.instrument is None:
            self._bind(series)
        if series.gauge:
            series.table[attr_key] = self.last_value(number, attr_dict)
        elif not series.direct:
            series.pend(series, number, attr_key, attr_dict)  # type: ignore[misc]
        else:
            series.write(number, attr_dict)  # type: ignore[misc]

    def _sum(
        self, series: _Series, number: int | float, key: AttributeSet, attributes: Any
    ) -> None:
        """Add a counter's point to its pending sum, or write it to the SDK: inside a span
        (for its exemplar), and as the first point of its attribute set (so its stream
        starts now)."""
        started = series.defer if key is _NO_KEY else key in series.pending
        if started and not self.in_context() and not _observing.active:  # type: ignore[misc]
            with series.sum_lock:
                if key is _NO_KEY:
                    series.plain += number
                else:
                    series.pending[key][0] += number
            return
        series.write(number, attributes)  # type: ignore[misc]
        if not started:
            with self._deferring_lock:
                if key is _NO_KEY:
                    series.defer = True
                else:
                    with series.sum_lock:
                        series.pending.setdefault(key, [0, attributes])
                if series not in self._deferring:
                    self._deferring = (*self._deferring, series)

    def _flush_sums(self, _options: Any) -> list[Any]:
        """Hand every pending sum to the SDK (its collection runs this before it reads the
        synchronous instruments); exports nothing itself."""
        for series in self._deferring:
            with series.sum_lock:
                plain, series.plain = series.plain, 0
                labelled = [slot[:] for slot in series.pending.values() if slot[0]]
                for slot in series.pending.values():
                    slot[0] = 0
            try:
                if plain:
                    series.write(plain)  # type: ignore[misc]
                for total, attributes in labelled:
                    series.write(total, attributes)  # type: ignore[misc]
            except Exception:
                warn_once(
                    f"flush:{series.spec.name}",
                    f"rlmetrics: handing {series.spec.name!r}'s sums to the SDK failed",
                )
        for series in self._holding:
            try:
                with series.flush_lock:
                    for slot in list(series.held.values()):
                        self._hand_over(series, slot)
            except Exception:
                warn_once(
                    f"flush:{series.spec.name}",
                    f"rlmetrics: handing {series.spec.name!r}'s values to the SDK failed",
                )
        return []

    def _hold(
        self, series: _Series, number: int | float, key: AttributeSet, attributes: Any
    ) -> None:
        """Hold a histogram's value until the next collection (see the module's docstring),
        or write it to the SDK: inside a span (for its exemplar, after what is held), as the
        first value of its attribute set (its stream starts now), and at the cap (with what
        is held, in order)."""
        slot = series.held.get(key)
        current = self.in_context()  # type: ignore[misc]
        if slot is None:
            series.write(number, attributes, current or self.outside_spans)  # type: ignore[misc]
            new_slot = [array("d"), attributes]  # allocated before the locks: it may run the GC
            with self._deferring_lock:
                with series.sum_lock:
                    series.held.setdefault(key, new_slot)
                if series not in self._holding:
                    self._holding = (*self._holding, series)
            return
        if not current and not _observing.active:
            code = "d" if type(number) is float else "q"
            with series.sum_lock:
                values = slot[0]
                if values.typecode != code and not values:
                    values = slot[0] = array(code)
                if values.typecode == code and len(values) < HELD_VALUES_MAX - 1:
                    values.append(number)
                    return
            # full, or an int after floats (or a float after ints): handed over with the rest
        with series.flush_lock:
            self._hand_over(series, slot)
            series.write(number, attributes, current or self.outside_spans)  # type: ignore[misc]

    def hold_values(
        self, series: _Series, numbers: list[int | float], key: AttributeSet, attributes: Any
    ) -> None:
        """``_hold`` of each of ``numbers`` in order (a batch's values of one histogram under
        one attribute set), with its checks and its lock once for the run of them its held
        array takes; the rest (a first value, at the cap, a change of type, in a span) one
        by one, as ``_hold`` does them."""
        done = 0
        slot = series.held.get(key)
        if slot is not None and not self.in_context() and not _observing.active:  # type: ignore[misc]
            last = HELD_VALUES_MAX - 1
            with series.sum_lock:
                values = slot[0]
                for number in numbers:
                    code = "d" if type(number) is float else "q"
                    if values.typecode != code and not values:
                        values = slot[0] = array(code)
                    if values.typecode != code or len(values) >= last:
                        break
                    values.append(number)
                    done += 1
        for number in numbers[done:] if done else numbers:
            self._hold(series, number, key, attributes)

    def _hand_over(self, series: _Series, slot: list[Any]) -> None:
        """Record what one attribute set holds into the SDK, in order (``flush_lock`` held)."""
        with series.sum_lock:
            values = slot[0]
            if not values:
                return
            slot[0] = array(values.typecode)
        write, attributes, context = series.write, slot[1], self.outside_spans
        for value in values:
            write(value, attributes, context)  # type: ignore[misc]

    def retract(self, group: str, key: str, attributes: Attributes) -> None:
        series = self.groups[group][key]
        if not series.gauge:
            warn_once(
                f"retract:{group}:{key}",
                f"rlmetrics.retract: only gauges can retract an attribute set; "
                f"{series.spec.name!r} is a {series.spec.kind.value}",
            )
            return
        series.retract(attribute_set(attributes))

    # -- observing (the exporter's thread) ---------------------------------------------------

    def gauge_points(self) -> list[tuple[MetricSpec, list[LastValue]]]:
        """Each bound gauge that has points, and its points: what a collection exports for
        the gauges (none once the session ended)."""
        if not self.active:
            return []
        # list() of a table: one C-level copy, atomic under the GIL, so a step recording
        # meanwhile changes neither the iteration nor the points taken.
        return [(s.spec, list(s.table.values())) for s in list(self.gauges) if s.table]

    def _callback(self, series: _Series) -> Callable[[Any], list[Any]]:
        spec = series.spec
        # The last tuple the callback returned and the observations checked from it.
        memo: list[Any] = [None, []]

        def observe(_options: Any) -> list[Any]:
            if not self.active:
                return []
            try:
                _observing.active = True
                try:
                    result = spec.callback()  # type: ignore[misc]
                finally:
                    _observing.active = False
                if type(result) is tuple and result is memo[0]:
                    # The very tuple of the last collection (a snapshot its owner replaces
                    # when it has new readings): the same observations, checked once. A
                    # thousand hosts cost one check a cycle, not one a collection.
                    return memo[1]  # type: ignore[no-any-return]
                observed = list(result)
            except Exception:
                warn_once(
                    f"observe:{spec.name}",
                    f"rlmetrics: the callback of {spec.name!r} raised; its series is skipped in "
                    "this collection",
                )
                return []
            out = self._observations(series, observed)
            memo[:] = (result, out) if type(result) is tuple else (None, [])
            return out

        return observe

    def _observations(self, series: _Series, observed: list[Any]) -> list[Any]:
        spec, valid, observation = series.spec, series.valid, self._observation
        limit = spec.max_series if series.capped else INT64_MAX
        nonnegative = series.nonnegative
        seen: dict[AttributeSet, dict[str, str | int]] = {}  # the cap applies to one collection
        out: list[Any] = []
        append = out.append
        # Observations past the cap, folded into one overflow observation as the SDK's own
        # overflow aggregates them: summed for a sum, the last one for a gauge.
        overflow: int | float | None = None
        for item in observed:
            try:
                value, attributes = item
            except (TypeError, ValueError):
                value = attributes = _MISSING
            if ((kind := type(value)) is float and value - value == 0) or (
                kind is int and INT64_MIN <= value <= INT64_MAX
            ):
                # A callback yields the same attribute sets every collection: a finite number
                # under a set already checked, new to this collection and within the cap,
                # goes straight out (hundreds of hosts per collection, for example). A
                # frozenset of (name, value) pairs is a set its owner prepared once (a monitor
                # keeps one per host): no set to build or hash here, a third of the check.
                shape = type(attributes)
                if shape is frozenset:
                    key = attributes
                elif shape is dict:
                    try:
                        key = frozenset(attributes.items())
                    except TypeError:  # an unhashable value: point() says why
                        key = None
                else:
                    key = None
                if (
                    key is not None
                    and (checked := valid.get(key)) is not None
                    and key not in seen
                    and len(seen) < limit
                    and (value >= 0 or not nonnegative)
                ):
                    seen[key] = known = checked[1]
                    append(observation(value, known))
                    continue
            if value is _MISSING:  # reported outside the except: a traceback would say nothing
                warn_once(
                    f"observe:{spec.name}:shape",
                    f"rlmetrics: the callback of {spec.name!r} must yield (value, attributes) "
                    f"pairs, got a {type(item).__name__}",
                )
                continue
            point = series.point(value, attributes, seen)
            if isinstance(point, str):
                warn_once(
                    f"observe:{spec.name}:dropped",
                    f"rlmetrics: {spec.name!r} dropped an observation: {point}",
                )
                continue
            number, key, attr_dict = point
            if key is _OVERFLOW_KEY:
                overflow = number if overflow is None or not series.sums else overflow + number
            else:
                out.append(observation(number, attr_dict))
        if overflow is not None:
            out.append(observation(overflow, OVERFLOW_ATTRIBUTES))
        return out


def _current_context() -> Callable[[], Any]:
    """What returns OpenTelemetry's current context: ``get`` of the context variable it is
    kept in under the default (contextvars) runtime context, else the API's ``get_current``."""
    from contextvars import ContextVar

    from opentelemetry import context

    variable = getattr(getattr(context, "_RUNTIME_CONTEXT", None), "_current_context", None)
    return variable.get if isinstance(variable, ContextVar) else context.get_current


class Recorder:
    """The recording half of :class:`~rlmetrics.registry.MetricRegistry`: the calls a
    training loop makes, written into the bound :class:`Session`, and no-ops while none is.

    The loops live here rather than in the session: ``rlmetrics.record`` is this method
    bound to the default registry, so a call reaches its loop in one Python frame (a
    function finding the session and calling into it made two). None of these raise.
    """

    _session: Session | None  # set by MetricRegistry: at init, bind, release and fork
    #: The last attribute mapping ``record`` was given (a copy) and its attribute set.
    _last_attributes: tuple[Any, AttributeSet] = ({}, frozenset())

    def record(self, group: str, values: Mapping[str, Any], attributes: Attributes = None) -> None:
        """Record ``values`` by registry key under ``attributes``; a no-op unless telemetry
        is exporting. Never raises; skips None."""
        session = self._session
        if session is None:
            return
        try:
            try:
                series_by_key = session.groups[group]
            except KeyError:
                _no_group(group)
                return
            # Two loops, unlabelled and labelled, alike but apart: one shared loop tests which
            # it is on every key, a few steps of a call that costs the SDK's own call again.
            if not attributes:
                for key in values:  # not items(): that builds a view and a tuple per key
                    value = values[key]
                    try:
                        series = series_by_key[key]
                    except KeyError:
                        if value is not None:
                            _unknown(group, key, series_by_key)
                        continue
                    if (
                        series.recordable
                        and (
                            ((kind := type(value)) is float and value - value == 0.0)
                            # Within one 30-bit digit, which CPython compares on its fast
                            # path (unchained: two fewer steps); a larger int takes write()'s
                            # check.
                            or (kind is int and value <= 2**30 - 1 and value >= -(2**30 - 1))
                        )
                        and value >= series.least
                    ):
                        # The commonest point of all, a finite number on an unlabelled series
                        # that already has its instrument: to the SDK, to a gauge's table or
                        # to a counter's sum, with no call of rlmetrics' own.
                        if series.direct:
                            series.write(  # type: ignore[misc]
                                value, None, session.context() or session.outside_spans
                            )
                        elif series.gauge:
                            last = series.table.get(_NO_KEY)
                            if last is None:
                                series.table[_NO_KEY] = session.last_value(value, None)
                            else:
                                last.current = value
                        elif series.defer:
                            if current := session.in_context():  # type: ignore[misc]
                                # In a span: to the SDK, for its exemplar.
                                series.write(value, None, current)  # type: ignore[misc]
                            else:
                                # A counter outside any span: added up until the collection.
                                with series.sum_lock:
                                    series.plain += value
                        else:
                            # A histogram's value, or a counter's first (its stream starts).
                            series.pend(series, value, _NO_KEY, None)  # type: ignore[misc]
                    elif value is not None:
                        session.write(series, group, key, value, None)
                return
            # The attribute set, found once for every key of the call. A loop passes the same
            # few dicts again and again: comparing with the last one (a copy, so a dict changed
            # in place is seen) is cheaper than building its set.
            previous = self._last_attributes
            labelled: AttributeSet
            if previous[0] == attributes:
                labelled = previous[1]
            elif type(attributes) is frozenset:
                labelled = attributes
            else:
                try:
                    labelled = attribute_set(attributes)
                    self._last_attributes = (dict(attributes), labelled)
                except Exception:
                    labelled = _MISSING  # admitted nowhere: write() says what is wrong with it
            for key in values:
                value = values[key]
                try:
                    series = series_by_key[key]
                except KeyError:
                    if value is not None:
                        _unknown(group, key, series_by_key)
                    continue
                if (
                    # Under an attribute set this series already admitted (checked against
                    # the declaration and counted against the cap once).
                    (known := series.admitted.get(labelled)) is not None
                    and series.recordable
                    and (
                        ((kind := type(value)) is float and value - value == 0.0)
                        or (kind is int and value <= 2**30 - 1 and value >= -(2**30 - 1))
                    )
                    and value >= series.least
                ):
                    if series.direct:
                        series.write(  # type: ignore[misc]
                            value, known, session.context() or session.outside_spans
                        )
                    elif series.gauge:
                        last = series.table.get(labelled)
                        if last is None:
                            series.table[labelled] = session.last_value(value, known)
                        else:
                            last.current = value
                    else:
                        series.pend(series, value, labelled, known)  # type: ignore[misc]
                elif value is not None:
                    session.write(series, group, key, value, attributes)
        except Exception:
            _record_failed(group)

    def record_values(
        self, group: str, key: str, values: list[Any], attributes: AttributeSet
    ) -> None:
        """Record each of ``values`` into one series by registry key under ``attributes`` (a
        prepared attribute set: a frozenset of pairs), as ``record`` would one by one, in
        order: a family's histogram values of a batch, checked and held in one call. A no-op
        unless telemetry is exporting. Never raises; skips None."""
        session = self._session
        if session is None:
            return
        try:
            series = session.groups[group][key]
        except KeyError:
            for value in values:
                self.record(group, {key: value}, attributes)  # says what is missing
            return
        try:
            # Unlabelled: held under no set with no attributes, as record() holds it.
            key_set, given = (attributes, attributes) if attributes else (_NO_KEY, None)
            known = series.admitted.get(attributes) if attributes else None
            if (
                (attributes and known is None)  # a set not admitted yet: record() admits it
                or not series.recordable
                or series.direct
                or series.gauge
                or not series.holds
            ):
                for value in values:
                    self.record(group, {key: value}, attributes)
                return
            least, good = series.least, []
            for value in values:
                if (
                    ((kind := type(value)) is float and value - value == 0.0)
                    or (kind is int and value <= 2**30 - 1 and value >= -(2**30 - 1))
                ) and value >= least:
                    good.append(value)
                elif value is not None:
                    # record()'s checked path (a value it drops is said), after the ones
                    # before it: the SDK gets them in the order given.
                    if good:
                        session.hold_values(series, good, key_set, known)
                        good = []
                    session.write(series, group, key, value, given)
            if good:
                session.hold_values(series, good, key_set, known)
        except Exception:
            _record_failed(group)

    def record_points(self, group: str, key: str, points: Iterable[tuple[Any, Attributes]]) -> None:
        """Record several ``(value, attributes)`` points of one series by registry key (a
        dimensioned gauge updated for every attribute set at once); a no-op unless telemetry
        is exporting. Never raises; skips None."""
        session = self._session
        if session is None:
            return
        try:
            series_by_key = session.groups.get(group)
            if series_by_key is None:
                _no_group(group)
                return
            series = series_by_key.get(key)
            if series is None:
                _unknown(group, key, series_by_key)
                return
            last_value, admitted = session.last_value, series.admitted
            table = series.table if series.gauge else None
            for value, attributes in points:
                if (
                    type(value) is float
                    and value - value == 0
                    and series.recordable
                    and type(attributes) is frozenset
                    and (known := admitted.get(attributes)) is not None
                    and value >= series.least
                ):
                    # A finite float under a prepared attribute set already admitted: the
                    # dimensioned gauge's every-step case, written without a call.
                    if table is None:
                        series.write(value, known)  # type: ignore[misc]
                    elif (last := table.get(attributes)) is None:
                        table[attributes] = last_value(value, known)
                    else:
                        last.current = value
                elif value is not None:
                    session.write(series, group, key, value, attributes)
        except Exception:
            _record_failed(group)

    def record_declared(
        self, group: str, metrics: Mapping[str, Any], attributes: Attributes = None
    ) -> dict[str, Any]:
        """Record every key declared under ``group`` that ``metrics`` carries; returns what
        it found, or ``{}`` unless telemetry is exporting. The teeing family's one call: the
        declared keys are looked up in the dict, not the dict scanned. A key logged with None
        is dropped and said, as NaN or a string is (the one rule for a logged value that is
        not a finite number); ``record`` itself skips None, a reading a family did not take.
        Never raises."""
        session = self._session
        if session is None:
            return {}
        try:
            series_by_key = session.groups.get(group, {})
            # Whichever side is shorter is scanned: a 4-key dict costs 4 lookups, not one per
            # declared key (the training family declares two dozen).
            if len(metrics) < len(series_by_key):
                present = {
                    key: value
                    for key in metrics
                    if key in series_by_key
                    and (value := metrics.get(key, _MISSING)) is not _MISSING
                }
            else:
                present = {
                    key: value
                    for key in series_by_key
                    if (value := metrics.get(key, _MISSING)) is not _MISSING
                }
            try:
                logged_none = None in present.values()
            except Exception:  # an array's == answers an array
                logged_none = any(value is None for value in present.values())
            if logged_none:
                for key in [k for k, v in present.items() if v is None]:
                    del present[key]
                    warn_once(
                        f"record:{group}:{key}:dropped:none",
                        f"rlmetrics.record: {series_by_key[key].spec.name} (key {key!r}) "
                        "dropped a value: None is not a finite number",
                    )
        except Exception:
            warn_once(
                f"record:{describe_key(group)}:lookup",
                f"rlmetrics: reading the {describe_key(group)} keys failed",
            )
            return {}
        if present:
            self.record(group, present, attributes)
        return present

    def retract(self, group: str, key: str, attributes: Attributes = None) -> None:
        """Stop exporting one gauge attribute set: it disappears from the next collection."""
        session = self._session
        if session is None:
            return
        try:
            session.retract(group, key, attributes)
        except Exception:
            where = f"{describe_key(group)}, {describe_key(key)}"
            warn_once(f"retract:{where}", f"rlmetrics.retract({where}) failed")
