"""Do two Ethos-U lowerings compute the same function? Ask the TOSA reference model.

Each delegate's .tosa from one lowering is paired with the same delegate of
the other; both run on the same random inputs (int8/int16 across their full
range) in tosa-tools' reference model, and the outputs are compared exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graph_io.tosa import tosa_inputs


def random_inputs(specs, rng: np.random.Generator) -> list[np.ndarray]:
    """Random arrays for tosa_inputs() specs: integers over their whole range, floats standard normal."""
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


class ReferenceRejected(RuntimeError):
    """The TOSA reference model did not run a program; `status` is "unpredictable" or "error: ..."."""

    def __init__(self, path: Path, status: str):
        super().__init__(f"TOSA reference model rejected {Path(path).name}: {status}")
        self.status = status


def run_tosa(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of one TOSA flatbuffer on the reference model; raises ReferenceRejected unless it is valid."""
    import tosa_reference_model as reference

    try:
        outputs, status = reference.run(Path(path).read_bytes(), inputs)
    except Exception as exc:  # the reference model's own failures become a status
        raise ReferenceRejected(path, f"error: {type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc
    name = str(status).split(".")[-1]
    if name != "TOSA_VALID":
        raise ReferenceRejected(path, "unpredictable" if name == "TOSA_UNPREDICTABLE" else f"error: {name}")
    return [np.asarray(o) for o in outputs]


@dataclass
class Equivalence:
    """`equivalent` is None when it could not be checked (a side the reference model rejects); the
    per-side `reference` status is "ok", "unpredictable" or "error: ..."."""

    equivalent: bool | None
    max_abs_diff: float | None
    delegates: int
    notes: list[str]
    reference: dict[str, str] = field(default_factory=lambda: {"left": "ok", "right": "ok"})


def compare_lowerings(left: list[Path], right: list[Path], trials: int = 3, seed: int = 0) -> Equivalence:
    """Run both lowerings' delegates on the same random inputs; equal outputs (exactly) or not.

    Each side runs on its own, so a program the reference model rejects is recorded against that side
    and the comparison says it could not be checked instead of failing."""
    if len(left) != len(right):
        return Equivalence(False, float("inf"), 0, [f"delegate count differs: {len(left)} vs {len(right)}"])
    rng = np.random.default_rng(seed)
    worst, notes = 0.0, []
    reference = {"left": "ok", "right": "ok"}
    for a, b in zip(left, right):
        specs_a, specs_b = tosa_inputs(a), tosa_inputs(b)
        if [(s[1], s[2]) for s in specs_a] != [(s[1], s[2]) for s in specs_b]:
            return Equivalence(False, float("inf"), len(left), [f"{a.name}: inputs differ {specs_a} vs {specs_b}"])
        for _ in range(trials):
            inputs = random_inputs(specs_a, rng)
            outs = {}
            for side, path in (("left", a), ("right", b)):
                if reference[side] != "ok":
                    continue
                try:
                    outs[side] = run_tosa(path, inputs)
                except ReferenceRejected as exc:
                    reference[side] = exc.status
                    notes.append(str(exc))
            if len(outs) < 2:
                continue
            out_a, out_b = outs["left"], outs["right"]
            if len(out_a) != len(out_b) or any(x.shape != y.shape for x, y in zip(out_a, out_b)):
                return Equivalence(False, float("inf"), len(left), [f"{a.name}: output shapes differ"], reference)
            for x, y in zip(out_a, out_b):
                worst = max(
                    worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
                )
    if any(status != "ok" for status in reference.values()):
        return Equivalence(None, None, len(left), notes, reference)
    return Equivalence(worst == 0.0, worst, len(left), notes, reference)
