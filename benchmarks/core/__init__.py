"""Benchmarks of the core: solvers, cost models, the service, multi-method problems."""
