"""Async efficiency: where wall time went, per category, as two dimensioned gauges.

Three clocks measure these categories and only one of them may be summed against elapsed
time, so every point says which clock (``rl.efficiency.measurement``) and which period
(``rl.efficiency.window``) it covers:

- ``wall_clock``: the driver, sequentially; the per-step idle categories are deltas of one
  step (window ``step``), ``init/total`` a run constant republished every step (``run``);
- ``collector_wall_clock``: the collector's loop thread, concurrent with the driver (``run``);
- ``thread_seconds``: summed over the collector's worker threads, not durations at all (8
  threads backing off 10 s give 80) (``run``).

``EfficiencyTimer`` (driver, reset per step) and ``CollectorTimer`` (thread-safe, never reset)
produce the :class:`~rlmetrics.events.EfficiencySummary` this family exports. Both are
:class:`rlmetrics.PhaseTimer` s: their ``time(category)`` is a phase, a span while tracing.

The family also offers its categories to ``rlmetrics.phase`` (``register_phases``): a phase
named after a category is accounted in the step's summary, per step (``step`` window) or over
the run (``run`` window), and its span carries the category's bucket, with the spec's two
deliberate differences from the metric's ``rl.bucket`` (:func:`span_bucket`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .. import hookimpl
from .._warn import warn_once
from ..events import EfficiencySummary
from ..registry import declare, is_exporting, record_points, retract
from ..spec import MEAN, OPEN, STRAGGLER, Kind, MetricSpec
from ..tracing import Phase, PhaseKind, PhaseTimer

__all__ = [
    "COLLECTOR_WALL_CLOCK",
    "MEASUREMENTS",
    "GROUP",
    "RUN_WINDOW",
    "STEP_WINDOW",
    "THREAD_SECONDS",
    "WALL_CLOCK",
    "CollectorTimer",
    "EfficiencyTimer",
    "computed_pct_window",
    "efficiency_bucket",
    "efficiency_pct",
    "efficiency_window",
    "span_bucket",
    "step_seconds",
]

GROUP = "rl.efficiency"
SECONDS = "rl.efficiency.seconds"
PCT = "rl.efficiency.pct"
CATEGORY_ATTR = "rl.efficiency.category"
MEASUREMENT_ATTR = "rl.efficiency.measurement"
WINDOW_ATTR = "rl.efficiency.window"
BUCKET_ATTR = "rl.bucket"

WALL_CLOCK = "wall_clock"
COLLECTOR_WALL_CLOCK = "collector_wall_clock"
THREAD_SECONDS = "thread_seconds"
STEP_WINDOW = "step"
RUN_WINDOW = "run"
INIT_TOTAL = "init/total"

#: Each known category and the clock that measures it.
MEASUREMENTS = {
    INIT_TOTAL: WALL_CLOCK,
    "idle/buffer_starvation": WALL_CLOCK,
    "idle/refit_bubble": WALL_CLOCK,
    "idle/validation": WALL_CLOCK,
    "idle/refit_event_wait": COLLECTOR_WALL_CLOCK,
    "idle/generation_limit_pause": COLLECTOR_WALL_CLOCK,
    "idle/buffer_full_backoff": THREAD_SECONDS,
    "wasted/failed_trajectory": THREAD_SECONDS,
}

declare(
    GROUP,
    [
        MetricSpec(
            SECONDS,
            Kind.GAUGE,
            unit="s",
            description="Time attributed to one efficiency category; filter on "
            "rl.efficiency.measurement before summing against elapsed time",
            attributes={
                CATEGORY_ATTR: OPEN,
                MEASUREMENT_ATTR: {WALL_CLOCK, COLLECTOR_WALL_CLOCK, THREAD_SECONDS},
                WINDOW_ATTR: {STEP_WINDOW, RUN_WINDOW},
                BUCKET_ATTR: {"productive", "overhead", "idle", "wasted"},
            },
            max_series=32,
            reduce=STRAGGLER,
        ),
        MetricSpec(
            PCT,
            Kind.GAUGE,
            unit="%",
            description="Productive share of driver-side wall clock over the window named by "
            "rl.efficiency.window",
            attributes={MEASUREMENT_ATTR: {WALL_CLOCK}, WINDOW_ATTR: {STEP_WINDOW, RUN_WINDOW}},
            reduce=MEAN,
        ),
    ],
)


def efficiency_window(category: str, measurement: str) -> str:
    """``step`` for the driver's per-step categories; ``run`` for ``init/total`` (a constant
    republished every step) and everything from the never-reset collector timer."""
    return STEP_WINDOW if measurement == WALL_CLOCK and category != INIT_TOTAL else RUN_WINDOW


def efficiency_bucket(category: str) -> str:
    """The goodput bucket a category's seconds belong to (``init/total`` is overhead)."""
    head = category.split("/", 1)[0]
    return head if head in ("idle", "wasted", "productive") else "overhead"


def span_bucket(category: str) -> str | None:
    """The ``rl.bucket`` a category's span carries, where the spec makes it differ from the
    metric's (its two documented metric/span disagreements):

    - the collector loop's categories (``collector_wall_clock``) carry none: as metrics they
      are ``idle`` and rely on the ``rl.efficiency.measurement`` filter, which a trace lacks;
    - ``idle/validation`` is ``overhead``: the training GPUs idle (the driver's timer) while
      the generation GPUs do necessary non-training work (what a span covering it says).
    """
    if MEASUREMENTS.get(category) == COLLECTOR_WALL_CLOCK:
        return None
    if category == "idle/validation":
        return "overhead"
    return efficiency_bucket(category)


def efficiency_pct(summary: EfficiencySummary) -> tuple[float, str] | None:
    """``(percent, window)``: the productive share of driver wall clock.

    A percentage the caller already computed wins, with the window its flag names (``run``
    when absent). Otherwise, against a per-step wall time the numerator is the three
    step-window idle categories only (``init/total`` is a run constant and the collector is
    on another clock); against the run's elapsed time it is every wall-clock category, which
    says little: that ratio climbs toward 100% as the run lengthens. None when a step's
    categories add up past its wall time (timed at once: said once).
    """
    if summary.efficiency_pct is not None:
        return summary.efficiency_pct, STEP_WINDOW if summary.pct_per_step else RUN_WINDOW
    window = computed_pct_window(summary)
    if window is None:
        return None
    total = summary.step_wall_time_s if window == STEP_WINDOW else summary.run_elapsed_s
    if total is None:  # not reached: the window says which was given
        return None
    counted = [
        category
        for category in (*summary.seconds, *summary.unmeasured)
        if MEASUREMENTS.get(category) == WALL_CLOCK
        and (window == RUN_WINDOW or efficiency_window(category, WALL_CLOCK) == STEP_WINDOW)
    ]
    if not summary.unmeasured.isdisjoint(counted):
        return None  # a category it counts was logged without a number: the pct is unknown
    waste = sum(summary.seconds[category] for category in counted)
    if total <= 0:
        return 100.0, window
    if waste > total and window == STEP_WINDOW:
        # More idle than the step lasted: phases of different categories timed at once
        # (overlapping phases of one category count once), seconds added by hand, or a
        # phase begun before the step. How much of the step was idle cannot be told from
        # the sum: 0 % would be a plausible wrong value.
        warn_once(
            "efficiency:overlap",
            f"rlmetrics: a step's wall-clock idle categories ({', '.join(sorted(counted))}) "
            f"add up to {waste:.3g} s, more than the step's wall time of {total:.3g} s: "
            "phases of different categories timed at once (by concurrent tasks or threads; "
            "overlapping phases of one category count once), seconds added with "
            "rlmetrics.account or a timer's record(), or a phase begun before the step. That "
            "step's efficiency pct is unknown (no point); time each moment of the driver's "
            "wait in one category. Said once",
            expected=True,
        )
        return None
    return 100.0 * (1.0 - min(waste, total) / total), window


def computed_pct_window(summary: EfficiencySummary) -> str | None:
    """The window of the pct :func:`efficiency_pct` computes from ``summary``'s categories
    (against the step's wall time, else the run's elapsed time), or None without either."""
    if summary.step_wall_time_s is not None:
        return STEP_WINDOW
    if summary.run_elapsed_s is not None:
        return RUN_WINDOW
    return None


_STEP_ZEROS = {
    category: 0.0
    for category, measurement in MEASUREMENTS.items()
    if efficiency_window(category, measurement) == STEP_WINDOW
}


def step_seconds(summary: EfficiencySummary) -> dict[str, float]:
    """``summary.seconds`` with every step-window category a step summary lacks set to 0.

    The driver's timer resets every step, so a category absent from a step spent no time in
    it: its gauge must say 0, not repeat the previous step's value (which the step's own pct
    leaves out, and which summing across steps would count twice). A summary is a step's
    when it carries a step wall time, a per-step pct or any step-window category.
    """
    seconds = summary.seconds
    if _of_a_step(summary):
        if summary.unmeasured:  # logged without a number: unknown, not 0 (a gap)
            zeros = {c: 0.0 for c in _STEP_ZEROS if c not in summary.unmeasured}
            return {**zeros, **seconds}
        return {**_STEP_ZEROS, **seconds}
    return dict(seconds)


def _of_a_step(summary: EfficiencySummary) -> bool:
    """Whether ``summary`` is a step's: it carries a step wall time, a per-step pct or a
    step-window category's seconds."""
    return (
        summary.step_wall_time_s is not None
        or bool(summary.pct_per_step)
        or not summary.seconds.keys().isdisjoint(_STEP_ZEROS)
    )


# Each known category's attribute set, prepared once (a frozenset of pairs, which record
# takes as it is): the family records every category every step.
_CATEGORY_ATTRIBUTES = {
    category: frozenset(
        {
            CATEGORY_ATTR: category,
            MEASUREMENT_ATTR: measurement,
            WINDOW_ATTR: efficiency_window(category, measurement),
            BUCKET_ATTR: efficiency_bucket(category),
        }.items()
    )
    for category, measurement in MEASUREMENTS.items()
}
_PCT_ATTRIBUTES = {
    window: frozenset({MEASUREMENT_ATTR: WALL_CLOCK, WINDOW_ATTR: window}.items())
    for window in (STEP_WINDOW, RUN_WINDOW)
}


@hookimpl(tee=True)
def on_efficiency_summary(summary: EfficiencySummary) -> None:
    if not is_exporting():
        return
    seconds = step_seconds(summary)
    points = [
        (value, attributes)
        for category, value in seconds.items()
        if (attributes := _CATEGORY_ATTRIBUTES.get(category)) is not None
    ]
    if len(points) < len(seconds):
        unknown = sorted(set(seconds) - set(_CATEGORY_ATTRIBUTES))
        warn_once(
            "efficiency:unknown-category",
            f"rlmetrics: efficiency categories {unknown} have no known measurement (known: "
            f"{sorted(MEASUREMENTS)}); not exported. Later unknown categories are reported at "
            "DEBUG",
        )
    record_points(GROUP, SECONDS, points)
    # A category logged without a number has no value this step: its point goes (a visible
    # gap, as the spec wants, rather than the last step's value or a plausible 0).
    for category in summary.unmeasured:
        gap = _CATEGORY_ATTRIBUTES.get(category)
        if gap is not None:
            retract(GROUP, SECONDS, gap)
    pct = efficiency_pct(summary)
    if pct is not None:
        record_points(GROUP, PCT, [(pct[0], _PCT_ATTRIBUTES[pct[1]])])
    elif summary.unmeasured and (window := computed_pct_window(summary)) is not None:
        retract(GROUP, PCT, _PCT_ATTRIBUTES[window])
    elif _of_a_step(summary):
        # A step's pct is that step's: one that gave none has none (not the last step's).
        retract(GROUP, PCT, _PCT_ATTRIBUTES[STEP_WINDOW])


@hookimpl
def register_phases(register: Callable[[str, PhaseKind], None]) -> None:
    """Every category, to ``rlmetrics.phase``: per step in the ``step`` window, over the run
    in the ``run`` window, its span with :func:`span_bucket`; overlapping phases of a
    wall-clock category (``wall_clock``, ``collector_wall_clock``) count once, those of a
    ``thread_seconds`` one each."""
    for category, measurement in MEASUREMENTS.items():
        register(
            category,
            PhaseKind(
                bucket=span_bucket(category),
                cumulative=efficiency_window(category, measurement) == RUN_WINDOW,
                wall_clock=measurement != THREAD_SECONDS,
            ),
        )


# -- the accounting ---------------------------------------------------------------------------


class _CategoryTimer(PhaseTimer):
    """Times named categories (a phase each, a span while tracing); subclasses say which."""

    CATEGORIES: ClassVar[frozenset[str]] = frozenset()

    def _check(self, category: str) -> None:
        if category not in self.CATEGORIES:
            raise ValueError(
                f"{type(self).__name__} times {sorted(self.CATEGORIES)}; {category!r} is not one "
                f"of them (measurements: {MEASUREMENTS})"
            )

    def time(
        self, category: str, bucket: str | None = None, tags: Mapping[str, Any] | None = None
    ) -> Phase:
        """Add the wall time of the ``with`` block to ``category``; while tracing it is also
        the category's span."""
        self._check(category)
        return super().time(category, bucket, tags)

    def record(self, category: str, seconds: float) -> None:
        self._check(category)
        super().record(category, seconds)


class EfficiencyTimer(_CategoryTimer):
    """The driver's timer: wall-clock categories of one step, reset by :meth:`step_summary`.

    ``init/total`` is timed once before the loop and republished in every summary, so it
    does not vanish from a dashboard after the first step.

    :param clock: a function returning seconds; the default is monotonic.
    """

    CATEGORIES: ClassVar[frozenset[str]] = frozenset(
        c for c, m in MEASUREMENTS.items() if m == WALL_CLOCK
    )

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock)
        self._run_start = self._step_start = self._clock.now()

    def start_step(self) -> None:
        """Start the step's wall clock (the end of the previous step's summary does it too)."""
        self._step_start = self._clock.now()

    def step_summary(self, collector: CollectorTimer | None = None) -> EfficiencySummary:
        """This step's summary (plus the collector's run totals), then reset for the next."""
        now = self._clock.now()
        # A wall-clock wait still open counts up to now here, the rest in the next step.
        seconds = self.take(keep=_RUN_CONSTANTS, now=now)
        if collector is not None:
            seconds.update(collector.snapshot())
        summary = EfficiencySummary(
            seconds=seconds,
            step_wall_time_s=(now - self._step_start) / 1e9,
            run_elapsed_s=(now - self._run_start) / 1e9,
        )
        self._step_start = now
        return summary


#: What the driver's timer keeps across steps.
_RUN_CONSTANTS = frozenset({INIT_TOTAL})


class CollectorTimer(_CategoryTimer):
    """The collector's timer: thread-safe, never reset, so its values cover the run.

    ``time()`` the loop thread's waits (collector_wall_clock) and ``record()`` the seconds
    each worker thread spent (thread_seconds; they add up across threads).

    :param clock: a function returning seconds; the default is monotonic.
    """

    CATEGORIES: ClassVar[frozenset[str]] = frozenset(
        c for c, m in MEASUREMENTS.items() if m != WALL_CLOCK
    )
