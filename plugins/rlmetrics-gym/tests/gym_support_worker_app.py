"""A Gym resources server as Uvicorn runs it with ``--workers 2``: every worker process imports
this module and starts its own telemetry in the app's lifespan, through
:func:`rlmetrics_gym.server.start_server_telemetry`, exporting over OTLP to the endpoint the
test gives in ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a receiver on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from rlmetrics_gym.server import GymServerMetricsMiddleware, start_server_telemetry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@contextlib.asynccontextmanager
async def lifespan(_app: Any) -> AsyncIterator[None]:
    telemetry = start_server_telemetry(
        "math_with_judge", "resources_servers", exporters=["otlp"], export_interval_s=0.2
    )
    try:
        yield
    finally:
        telemetry.shutdown(timeout_s=5)


async def pid(_request: Request) -> JSONResponse:
    return JSONResponse({"pid": os.getpid()})


app = Starlette(
    routes=[Route("/pid", pid)],
    middleware=[Middleware(GymServerMetricsMiddleware)],
    lifespan=lifespan,
)
