"""The Gym server middleware against the HTTP instrumentations a Gym server would otherwise use.

    python benchmarks/bench_http_middleware.py [--rounds 40] [--requests 500] [--update-readme]

Run it in the ``bench-http`` tox env, which installs the peers (never the core's dependencies):
``flock /work/locks/bench.lock tox run -e bench-http -- --update-readme``.

The same app, the same load, called in process the way uvicorn calls it (``bench_gym_middleware``'s
request cycle: one GET of ``/items/{item_id}`` answering a short text), each instrumentation used
the way its documentation says:

- **rlmetrics**: ``GymServerMetricsMiddleware`` wrapping the app, telemetry exporting to an
  in-memory reader (the request path makes no OpenTelemetry call: integer updates the
  exporter's thread reads at collection).
- **OpenTelemetry ASGI**: ``OpenTelemetryMiddleware`` (``opentelemetry-instrumentation-asgi``)
  wrapping the app, metrics to its own ``MeterProvider`` with an in-memory reader and no
  TracerProvider (its spans are non-recording: the cheapest it can be configured).
- **starlette-exporter**: ``app.add_middleware(PrometheusMiddleware)`` (prometheus_client).
- **prometheus-fastapi-instrumentator**: ``Instrumentator().instrument(app)`` on a FastAPI app,
  against the same FastAPI app bare and with rlmetrics' middleware.

Each round times the bare app and one instrumented app back to back (A B, then B A), as many
requests each, in this process's CPU time; the ratio of the two is the round's ratio, and the
min / median / max over the rounds are reported with the median added microseconds per request.
After the rounds every instrumentation's own request count is read back (rlmetrics' from the
exported ``gym.server.responses_total``, the peers' from their registries and reader) and must
equal the requests sent to it, exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from _harness import printed_into_readme
from bench_gym_middleware import SCOPE, build_app
from bench_gym_middleware import _Cycle as Cycle
from rlmetrics_gym.server import RESPONSES, STATUS_ATTR, GymServerMetricsMiddleware

from rlmetrics.testing import data_points, in_memory_telemetry, isolated_state

App = Callable[..., Any]


async def _requests(app: App, requests: int) -> None:
    for _ in range(requests):
        cycle = Cycle()
        await app(dict(SCOPE), cycle.receive, cycle.send)


class Case:
    """One instrumented app and how to read back the requests it counted."""

    def __init__(self, name: str, bare: App, app: App, counted: Callable[[], float]) -> None:
        self.name = name
        self.bare = bare
        self.app = app
        self.counted = counted
        self.sent = 0
        self.ratios: list[float] = []
        self.added: list[float] = []
        self.bare_s: list[float] = []


def _otel_asgi(app: App) -> tuple[App, Callable[[], float]]:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    wrapped = OpenTelemetryMiddleware(app, meter_provider=provider)

    def counted() -> float:
        # Its request-duration histogram counts every request it served (old or new semconv
        # name, whichever OTEL_SEMCONV_STABILITY_OPT_IN selects).
        data = reader.get_metrics_data()
        return sum(
            point.count
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name in ("http.server.duration", "http.server.request.duration")
            for point in metric.data.data_points
        )

    return wrapped, counted


def _sample(registry: Any, name: str) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    )


def _starlette_exporter() -> tuple[App, Callable[[], float]]:
    from prometheus_client import REGISTRY
    from starlette_exporter import PrometheusMiddleware

    app = build_app()
    app.add_middleware(PrometheusMiddleware, prefix="bench")
    return app, lambda: _sample(REGISTRY, "bench_requests_total")


def _fastapi_app() -> Any:
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI()

    @app.get("/items/{item_id}", response_class=PlainTextResponse)
    async def verify(item_id: str) -> str:
        return "ok"

    return app


def _instrumentator() -> tuple[App, Callable[[], float]]:
    from prometheus_client import CollectorRegistry
    from prometheus_fastapi_instrumentator import Instrumentator

    registry = CollectorRegistry()
    app = _fastapi_app()
    Instrumentator(registry=registry).instrument(app)
    return app, lambda: _sample(registry, "http_requests_total")


def _cases(reader: Any) -> list[Case]:
    def ours_counted() -> float:
        # Process-wide: both rlmetrics cases' middlewares add into the one series.
        return sum(
            point.value
            for point in data_points(reader.get_metrics_data(), RESPONSES)
            if point.attributes.get(STATUS_ATTR) == 200
        )

    starlette_bare, fastapi_bare = build_app(), _fastapi_app()
    otel_app, otel_counted = _otel_asgi(build_app())
    exporter_app, exporter_counted = _starlette_exporter()
    instrumented_app, instrumented_counted = _instrumentator()
    return [
        Case(
            "rlmetrics GymServerMetricsMiddleware",
            starlette_bare,
            GymServerMetricsMiddleware(build_app()),
            ours_counted,
        ),
        Case("OpenTelemetry ASGI (metrics only)", starlette_bare, otel_app, otel_counted),
        Case("starlette-exporter", starlette_bare, exporter_app, exporter_counted),
        Case(
            "FastAPI: rlmetrics GymServerMetricsMiddleware",
            fastapi_bare,
            GymServerMetricsMiddleware(_fastapi_app()),
            ours_counted,
        ),
        Case(
            "FastAPI: prometheus-fastapi-instrumentator",
            fastapi_bare,
            instrumented_app,
            instrumented_counted,
        ),
    ]


def _timed(loop: asyncio.AbstractEventLoop, app: App, requests: int) -> float:
    start = time.process_time()
    loop.run_until_complete(_requests(app, requests))
    return (time.process_time() - start) / requests


def measure(rounds: int, requests: int) -> list[Case]:
    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        cases = _cases(reader)
        loop = asyncio.new_event_loop()
        try:
            for case in cases:  # warm up every app (Starlette builds its stack on first call)
                for app in (case.bare, case.app):
                    loop.run_until_complete(_requests(app, 100))
                case.sent += 100
            for index in range(rounds):
                for case in cases:
                    if index % 2 == 0:
                        bare = _timed(loop, case.bare, requests)
                        ours = _timed(loop, case.app, requests)
                    else:
                        ours = _timed(loop, case.app, requests)
                        bare = _timed(loop, case.bare, requests)
                    case.sent += requests
                    case.ratios.append(ours / bare)
                    case.added.append(ours - bare)
                    case.bare_s.append(bare)
        finally:
            loop.close()
        _check_counts(cases)
    return cases


def _check_counts(cases: list[Case]) -> None:
    """Every instrumentation counted exactly the requests it served (rlmetrics' two cases
    share one process-wide series)."""
    by_reader: dict[int, list[Case]] = {}
    for case in cases:
        by_reader.setdefault(id(case.counted), []).append(case)
    for group in by_reader.values():
        sent = sum(case.sent for case in group)
        counted = group[0].counted()
        names = " + ".join(case.name for case in group)
        if counted != sent:
            raise SystemExit(f"{names}: counted {counted} requests, {sent} were sent")
        print(f"counts exact: {names}: {int(counted)} requests counted of {sent} sent")


def report(cases: list[Case], rounds: int, requests: int) -> None:
    print(
        f"{'instrumentation':<46} {'+us/req':>8} {'min':>7} {'median':>7} {'max':>7}"
        "   (ratio to the bare app)"
    )
    for case in cases:
        if case.name.startswith("FastAPI") and not cases[cases.index(case) - 1].name.startswith(
            "FastAPI"
        ):
            print()
        print(
            f"{case.name:<46} {statistics.median(case.added) * 1e6:>8.2f} "
            f"{min(case.ratios):>7.3f} {statistics.median(case.ratios):>7.3f} "
            f"{max(case.ratios):>7.3f}"
        )
    starlette = statistics.median(c.bare_s[i] for c in cases[:3] for i in range(rounds))
    fastapi = statistics.median(c.bare_s[i] for c in cases[3:] for i in range(rounds))
    print(
        f"\n{rounds} rounds of {requests} requests per app; the bare app takes "
        f"{starlette * 1e6:.1f} us CPU a request (Starlette), {fastapi * 1e6:.1f} us (FastAPI)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--requests", type=int, default=500, help="requests per app per round")
    parser.add_argument("--quick", action="store_true", help="5 rounds of 100 requests")
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args()
    rounds, requests = (5, 100) if args.quick else (args.rounds, args.requests)
    with printed_into_readme("bench-http-middleware" if args.update_readme else None):
        cases = measure(rounds, requests)
        print()
        report(cases, rounds, requests)


if __name__ == "__main__":
    main()
