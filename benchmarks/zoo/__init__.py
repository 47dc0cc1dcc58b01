"""Benchmarks of the zoo's model sources."""
