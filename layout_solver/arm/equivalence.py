"""Do two Ethos-U lowerings compute the same function? Ask the TOSA reference model.

Each delegate's .tosa from one lowering is paired with the same delegate of
the other; both run on the same random inputs (int8/int16 across their full
range) in tosa-tools' reference model, and the outputs are compared exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

_NUMPY = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "BOOL": np.bool_, "FP32": np.float32}


def tosa_inputs(path: Path) -> list[tuple[str, list[int], type]]:
    import tosa_serializer as ts

    graph = ts.TosaSerializer("")
    if not graph.loadTosaFlatbuffer(str(path)):
        raise ValueError(f"cannot read TOSA flatbuffer {path}")
    block = graph.regions[0].basicBlocks[0]
    specs = []
    for name in block.inputs:
        tensor = block.tensors[name]
        specs.append((name, list(tensor.shape), _NUMPY[tensor.dtype.name]))
    return specs


def random_inputs(specs, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for _, shape, dtype in specs:
        if dtype is np.float32:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        elif dtype is np.bool_:
            arrays.append(rng.integers(0, 2, size=shape).astype(np.bool_))
        else:
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype))
    return arrays


def run_tosa(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import tosa_reference_model as reference

    outputs, status = reference.run(Path(path).read_bytes(), inputs)
    if str(status).split(".")[-1] != "TOSA_VALID":
        raise RuntimeError(f"TOSA reference model rejected {path}: {status}")
    return [np.asarray(o) for o in outputs]


@dataclass
class Equivalence:
    equivalent: bool
    max_abs_diff: float
    delegates: int
    notes: list[str]


def compare_lowerings(left: list[Path], right: list[Path], trials: int = 3, seed: int = 0) -> Equivalence:
    if len(left) != len(right):
        return Equivalence(False, float("inf"), 0, [f"delegate count differs: {len(left)} vs {len(right)}"])
    rng = np.random.default_rng(seed)
    worst, notes = 0.0, []
    for a, b in zip(left, right):
        specs_a, specs_b = tosa_inputs(a), tosa_inputs(b)
        if [(s[1], s[2]) for s in specs_a] != [(s[1], s[2]) for s in specs_b]:
            return Equivalence(False, float("inf"), len(left), [f"{a.name}: inputs differ {specs_a} vs {specs_b}"])
        for _ in range(trials):
            inputs = random_inputs(specs_a, rng)
            out_a, out_b = run_tosa(a, inputs), run_tosa(b, inputs)
            if len(out_a) != len(out_b) or any(x.shape != y.shape for x, y in zip(out_a, out_b)):
                return Equivalence(False, float("inf"), len(left), [f"{a.name}: output shapes differ"])
            for x, y in zip(out_a, out_b):
                worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0)
    return Equivalence(worst == 0.0, worst, len(left), notes)
