"""`solve_problem()`: solve through the layout-solver service when one is configured, else in-process.

The lowering passes and the zoo call this. With a service URL (the argument,
or $LAYOUT_SOLVER_SERVICE) the problem goes to ``POST /v1/solve``; if the
service cannot be reached, answers an error, times out or returns something
that is not a solution, the problem is solved in-process and the solution's
notes say so, so the pass reports show it. Standard library only: the
lowering path needs no service extra.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from layout_solver.core.problem import Prices, Problem, Solution
from layout_solver.core.solve import DEFAULT_TIME_LIMIT, solve

SERVICE_ENV = "LAYOUT_SOLVER_SERVICE"
TOKEN_ENV = "LAYOUT_SOLVER_TOKEN"


class ServiceUnavailable(Exception):
    """The service did not answer with a solution (unreachable, time-out, HTTP error, bad reply)."""


def service_url(service: str | None = None) -> str | None:
    """The service to use: `service`, else $LAYOUT_SOLVER_SERVICE, else None (in-process)."""
    url = service if service is not None else os.environ.get(SERVICE_ENV, "")
    return url.rstrip("/") or None


def client_timeout(time_limit: float) -> float:
    """How long to wait for an answer: past the service's own hard limit (2 x limit + 10 s)."""
    return 2.0 * time_limit + 15.0


def solve_remote(
    problem: Problem, url: str, time_limit: float = DEFAULT_TIME_LIMIT, token: str | None = None
) -> Solution:
    """`problem` solved by the service at `url`; ServiceUnavailable on any failure."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    query = urllib.parse.urlencode({"time_limit": time_limit})
    request = urllib.request.Request(
        f"{url}/v1/solve?{query}", data=problem.model_dump_json().encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=client_timeout(time_limit)) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except (ValueError, AttributeError, OSError):
            detail = ""
        raise ServiceUnavailable(f"HTTP {exc.code}: {str(detail).splitlines()[0] if detail else exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:  # refused, DNS, time-out
        raise ServiceUnavailable(str(getattr(exc, "reason", exc))) from exc
    try:
        return Solution.model_validate_json(body)
    except ValueError as exc:
        raise ServiceUnavailable("the reply is not a solution") from exc


def solve_problem(
    problem: Problem,
    time_limit: float = DEFAULT_TIME_LIMIT,
    service: str | None = None,
    token: str | None = None,
    prices: Prices | None = None,
) -> Solution:
    """Solve `problem` (at `prices`, if given: `solve`'s) via the service if one is configured, else (or when it
    fails) in-process. The service is sent the problem at those prices, as a Problem of its own.

    The solution's notes record which one answered. An infeasible or invalid
    problem raises here exactly as `solve()` raises it: a failing service
    falls back, and the in-process solver gives the authoritative error.
    """
    url = service_url(service)
    if url is None:
        return solve(problem, time_limit=time_limit, prices=prices)
    try:
        solution = solve_remote(problem if prices is None else problem.priced(prices), url, time_limit, token)
    except ServiceUnavailable as exc:
        solution = solve(problem, time_limit=time_limit, prices=prices)
        solution.notes.append(f"service {url} failed ({exc}); solved in-process")
        return solution
    solution.notes.append(f"solved by service {url}")
    return solution
