"""Exact and heuristic solvers over the compiled problem."""
