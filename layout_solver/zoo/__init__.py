"""Built-in model zoo (imports torch; not part of the solver core)."""
