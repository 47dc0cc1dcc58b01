"""The solver as a service: `layout-solver serve` (HTTP/JSON) (the solution cache it keeps is the core's
`layout_solver.core.solution_cache`, which multi-method solves share).

- `app.py`: the FastAPI application (routes, limits, auth, metrics) and `serve()`; its cost query prices
  with the target the query names (`layout_solver.targets`).
- `pool.py`: solves in worker processes, with hard time limits and crash isolation.

The lowering path never imports this package: what passes call is `layout_solver.lowering.client.solve_problem()`
(the service if one is configured, else in-process; the standard library only).
"""
