"""The project's benchmarks, one module per measurement, in folders per area (arm, vulkan, core, zoo).

Run from the repository root as modules, e.g. `.venv/bin/python -m benchmarks.arm.total --out
benchmarks/results/arm_total.md`; results are committed under benchmarks/results/. `benchmarks.harness` holds
what they share (`--out`, printing and writing the result, geometric means);
`benchmarks/fingerprint.py` hashes what the lowering produces, to check a refactor changed no program.
"""
