"""The solver as a service: `layout-solver serve` (HTTP/JSON) and the client passes use (the solution cache it
keeps is the core's `layout_solver.solution_cache`, which multi-method solves share).

- `app.py`: the FastAPI application (routes, limits, auth, metrics) and `serve()`.
- `pool.py`: solves in worker processes, with hard time limits and crash isolation.
- `client.py`: `solve_problem()`, which passes and the zoo call: the service if one is
  configured (argument or $LAYOUT_SOLVER_SERVICE), else, or when it fails, in-process.

Only `client.py` is imported by the lowering path; it needs nothing beyond the standard library.
"""
