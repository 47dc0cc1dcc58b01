"""`layout-solver serve`: the solver behind an HTTP/JSON API (FastAPI on uvicorn).

Routes (OpenAPI docs at /docs):

- ``POST /v1/solve?time_limit=S``: body = a problem (the `layout-solver schema problem`
  JSON), answer = its solution. Cached by content (`problem_digest`); identical
  problems in flight are solved once. 422: not a valid problem (the CLI's message);
  409: infeasible (naming the conflict); 413: body too large; 504/503: the worker
  overran its hard limit / died (the pool replaces it).
- ``POST /v1/cost/transpose``: body = a `TransposeQuery`; answer = its price.
- ``GET /v1/schema/problem``, ``GET /v1/schema/solution``: JSON Schemas.
- ``GET /healthz`` (never guarded), ``GET /metrics`` (Prometheus text).

Every error is ``{"detail": "<one message>"}``; no response carries a traceback.
With a token (``--token`` / $LAYOUT_SOLVER_TOKEN) every route but /healthz wants
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pebble import ProcessExpired
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from layout_solver import __version__
from layout_solver.core.problem import Problem, Solution
from layout_solver.core.solution_cache import DEFAULT_MAX_BYTES, CacheEntry, SolutionCache
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.service.pool import SolverPool, hard_limit

log = logging.getLogger("layout_solver.service")

DEFAULT_PORT = 8731
DEFAULT_MAX_BODY = 64 << 20
COST_BODY_LIMIT = 64 << 10
KNOWN_ROUTES = (
    "/v1/solve",
    "/v1/cost/transpose",
    "/v1/schema/problem",
    "/v1/schema/solution",
    "/healthz",
    "/metrics",
    "/docs",
    "/openapi.json",
    "/docs/oauth2-redirect",
    "/redoc",
)


class ServiceSettings(BaseModel):
    """Everything `layout-solver serve` can be told; validated once at start-up."""

    host: str = "127.0.0.1"  # localhost unless told otherwise
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    cache_dir: Path | None = None  # default: ~/.cache/layout-solver/solutions
    cache_bytes: int = Field(DEFAULT_MAX_BYTES, gt=0)
    memory_cache_bytes: int = Field(256 << 20, ge=0)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY, gt=0)
    token: str | None = None
    default_time_limit: float = Field(DEFAULT_TIME_LIMIT, gt=0, allow_inf_nan=False)
    max_time_limit: float = Field(600.0, gt=0, allow_inf_nan=False)

    def resolved_cache_dir(self) -> Path:
        """`cache_dir`, or $XDG_CACHE_HOME (default ~/.cache)/layout-solver/solutions."""
        return (
            self.cache_dir
            or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "layout-solver" / "solutions"
        )


class ServiceError(Exception):
    """An HTTP error with its status and one-line message."""

    def __init__(self, status: int, message: str, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


class Metrics:
    """The service's Prometheus metrics, in a registry of their own (one per app)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("layout_solver_requests", "HTTP requests", ["route", "status"], registry=r)
        self.latency = Histogram(
            "layout_solver_request_seconds",
            "HTTP request latency",
            ["route"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.lookups = Counter(
            "layout_solver_cache_lookups",
            "solve requests by cache outcome (hit, miss, joined: waited for an identical solve in flight)",
            ["result"],
            registry=r,
        )
        self.solves = Counter("layout_solver_solves", "solves run in workers, by outcome", ["outcome"], registry=r)
        self.solve_seconds = Histogram(
            "layout_solver_solve_seconds",
            "solver time per solve (in the worker)",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.inflight = Gauge("layout_solver_inflight_solves", "solves running or queued", registry=r)


class SolverService:
    """Cache lookups, in-flight de-duplication and the worker pool behind /v1/solve.

    The server keeps recent answers in memory keyed by the request body's
    sha256 (the same bytes get the same bytes back, no parsing); everything
    else (validation, the content address, the shared disk cache, solving) is
    done in a worker.
    """

    def __init__(self, settings: ServiceSettings, metrics: Metrics):
        self.settings = settings
        self.metrics = metrics
        self.cache = SolutionCache(settings.resolved_cache_dir(), settings.cache_bytes)
        self.pool: SolverPool | None = None
        self._memory: OrderedDict[str, CacheEntry] = OrderedDict()
        self._memory_bytes = 0
        self._inflight: dict[str, tuple[float, asyncio.Task]] = {}

    def start(self) -> None:
        """Start the worker pool."""
        self.pool = SolverPool(self.settings.workers, self.cache)
        self.pool.warm_up()

    def stop(self) -> None:
        """Stop the worker pool."""
        if self.pool is not None:
            self.pool.close()

    def _remember(self, body_sha: str, entry: CacheEntry) -> None:
        old = self._memory.pop(body_sha, None)
        if old is not None:
            self._memory_bytes -= len(old.solution_json)
        if len(entry.solution_json) > self.settings.memory_cache_bytes:
            return
        self._memory[body_sha] = entry
        self._memory_bytes += len(entry.solution_json)
        while self._memory_bytes > self.settings.memory_cache_bytes:
            _, evicted = self._memory.popitem(last=False)
            self._memory_bytes -= len(evicted.solution_json)

    @staticmethod
    def _respond(entry: CacheEntry, outcome: str) -> Response:
        return Response(entry.solution_json, media_type="application/json", headers={"X-Layout-Solver-Cache": outcome})

    async def solve(self, body: bytes, time_limit: float) -> Response:
        """Solve one problem: from the cache, or in a worker within the time limit; returns the solution and where it
        came from.
        """
        body_sha = hashlib.sha256(body).hexdigest()
        cached = self._memory.get(body_sha)
        if cached is not None and cached.serves(time_limit):
            self._memory.move_to_end(body_sha)
            self.metrics.lookups.labels("hit").inc()
            return self._respond(cached, "hit")
        running = self._inflight.get(body_sha)
        if running is not None and running[0] >= time_limit:
            self.metrics.lookups.labels("joined").inc()
            entry, _ = await asyncio.shield(running[1])
            return self._respond(entry, "joined")
        task = asyncio.ensure_future(self._run(body_sha, body, time_limit))
        self._inflight[body_sha] = (time_limit, task)
        entry, outcome = await asyncio.shield(task)
        return self._respond(entry, outcome)

    async def _solved(self, body: bytes, time_limit: float) -> dict:
        """The worker's answer; where every worker died under the pool ("All workers expired": pebble fails every
        task it holds, a request just sent among them), the pool is replaced and the request sent once more."""
        try:
            return await asyncio.wrap_future(self.pool.submit(body, time_limit))
        except BrokenProcessPool:
            self.pool.replace_if_broken()
            return await asyncio.wrap_future(self.pool.submit(body, time_limit))

    async def _run(self, body_sha: str, body: bytes, time_limit: float) -> tuple[CacheEntry, str]:
        assert self.pool is not None, "the service has not started"
        self.metrics.inflight.inc()
        try:
            result = await self._solved(body, time_limit)
        except FutureTimeout as exc:
            self.metrics.solves.labels("timeout").inc()
            raise ServiceError(
                504,
                f"the solve overran its hard limit of {hard_limit(time_limit):.0f} s "
                f"(time limit {time_limit:g} s) and was stopped; the worker was replaced",
            ) from exc
        except ProcessExpired as exc:
            self.metrics.solves.labels("worker_died").inc()
            raise ServiceError(
                503,
                f"the solver worker died while solving (exit code {exc.exitcode}); the pool "
                "replaced it; retry the request",
            ) from exc
        finally:
            self.metrics.inflight.dec()
            if self._inflight.get(body_sha, (0.0, None))[1] is asyncio.current_task():
                del self._inflight[body_sha]
        if "error" in result:
            self.metrics.solves.labels(result["error"]).inc()
            status = 409 if result["error"] == "infeasible" else 422
            raise ServiceError(status, result["message"], ops=result["ops"], values=result["values"])
        if result["outcome"] == "solved":
            self.metrics.lookups.labels("miss").inc()
            self.metrics.solves.labels("ok").inc()
            self.metrics.solve_seconds.observe(result["seconds"])
        else:
            self.metrics.lookups.labels("hit").inc()
        self._remember(body_sha, result["entry"])
        return result["entry"], "miss" if result["outcome"] == "solved" else "hit"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ServiceError(400, f"bad Content-Length header {declared!r}")
        if int(declared) > limit:
            raise ServiceError(413, f"request body of {int(declared):,} bytes exceeds the limit of {limit:,} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServiceError(413, f"request body exceeds the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class GuardAndMeasure:
    """Pure ASGI middleware (no per-request task, unlike @app.middleware): the bearer-token check on
    every route but /healthz, and request counts and latency per route for /metrics."""

    def __init__(self, app, settings: ServiceSettings, metrics: Metrics):
        self.app = app
        self.expected = f"Bearer {settings.token}".encode() if settings.token else None
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        status = {"code": 500}

        async def send_recording(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if (
                self.expected is not None
                and path != "/healthz"
                and not secrets.compare_digest(dict(scope["headers"]).get(b"authorization", b""), self.expected)
            ):
                refuse = JSONResponse(
                    {"detail": "missing or wrong bearer token (Authorization: Bearer ...)"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await refuse(scope, receive, send_recording)
            else:
                await self.app(scope, receive, send_recording)
        finally:
            route = path if path in KNOWN_ROUTES else "other"
            self.metrics.requests.labels(route, str(status["code"])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def _checked_time_limit(value: float | None, settings: ServiceSettings) -> float:
    if value is None:
        return settings.default_time_limit
    if not math.isfinite(value) or value <= 0 or value > settings.max_time_limit:
        raise ServiceError(
            422,
            f"time_limit must be a positive finite number of seconds up to {settings.max_time_limit:g}, got {value}",
        )
    return value


def _answer_errors_as_json(app: FastAPI) -> None:
    """Every error as a JSON body {"detail": ...} with its status: the service's own, an invalid request (422), an
    unknown route (404, naming it) and anything unexpected (500; the traceback stays in the log)."""

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.message, **exc.extra}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def request_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = "; ".join(f"{' '.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if exc.status_code != 404 else f"no route {request.method} {request.url.path}"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)  # the traceback stays here
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, status_code=500)


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The ASGI application; the worker pool starts with the app's lifespan."""
    settings = settings or ServiceSettings()
    metrics = Metrics()
    service = SolverService(settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(service.start)
        try:
            yield
        finally:
            await run_in_threadpool(service.stop)

    app = FastAPI(
        title="layout-solver",
        version=__version__,
        lifespan=lifespan,
        description="Tensor memory-layout assignment as a service: problems in, solutions out.",
    )
    app.state.service = service

    app.add_middleware(GuardAndMeasure, settings=settings, metrics=metrics)

    _answer_errors_as_json(app)

    @app.post(
        "/v1/solve",
        response_model=Solution,
        responses={
            409: {"description": "infeasible"},
            413: {"description": "body too large"},
            422: {"description": "not a valid problem"},
            503: {"description": "worker died"},
            504: {"description": "hard limit overrun"},
        },
    )
    async def solve(
        request: Request,
        time_limit: float | None = Query(
            None, description="seconds; the answer is the best found by then, with its proven gap"
        ),
    ) -> Response:
        """Solve the problem in the body (JSON, the problem schema)."""
        limit = _checked_time_limit(time_limit, settings)
        body = await read_body(request, settings.max_body_bytes)
        return await service.solve(body, limit)

    @app.post("/v1/cost/transpose")
    async def cost_transpose(request: Request) -> dict:
        """Price one transpose (Ethos-U, TOSA) or representation change (Vulkan), as its target prices it: a
        TransposeQuery in the body."""
        from cost_models.query import TransposeQuery
        from layout_solver.targets import get_target

        body = await read_body(request, COST_BODY_LIMIT)
        try:
            query = TransposeQuery.model_validate_json(body)
        except ValidationError as exc:
            raise ServiceError(
                422,
                "; ".join(
                    f"{' '.join(str(p) for p in e['loc']) or 'body'}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors()
                ),
            ) from exc
        try:
            return await run_in_threadpool(get_target(query.target).price_transpose, query)
        except ValueError as exc:
            raise ServiceError(422, str(exc)) from exc

    @app.get("/v1/schema/{which}")
    async def schema(which: Literal["problem", "solution"]) -> dict:
        """The JSON Schema of problems or solutions (as `layout-solver schema`)."""
        return (Problem if which == "problem" else Solution).model_json_schema()

    @app.get("/healthz")
    async def healthz() -> dict:
        """Liveness; never needs the token."""
        return {"status": "ok", "version": __version__, "workers": settings.workers}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def serve(settings: ServiceSettings, log_level: str = "warning") -> None:
    """Run the service until interrupted."""
    import uvicorn

    uvicorn.run(
        create_app(settings), host=settings.host, port=settings.port, log_level=log_level, timeout_graceful_shutdown=5
    )
