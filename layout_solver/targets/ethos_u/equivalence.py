"""Do two Ethos-U lowerings compute the same function? Ask the TOSA reference model. And does each compute
what the quantized eager model does, within the tolerance executorch's own Arm tests allow?

Each delegate's .tosa from one lowering is paired with the same delegate of
the other; both run on the same random inputs (int8/int16 across their full
range; narrower where the full range makes both sides unpredictable) in
tosa-tools' reference model, and the outputs are compared exactly.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from executorch.backends.arm.test.runner_utils import (
    TosaReferenceModelDispatch,
    get_output_quantization_params,
    numpy_to_torch_tensor,
    torch_tensor_to_numpy,
)
from executorch.backends.arm.tosa.backend import arm_get_first_delegation_tag

from cost_models.vela import how_it_ended
from graph_io.tosa import index_bounds, tosa_inputs


def random_inputs(
    specs, rng: np.random.Generator, bounds: dict[str, int] | None = None, span: int | None = None
) -> list[np.ndarray]:
    """Random arrays for tosa_inputs() specs: integers over their whole range, or within [-span, span] where
    that is narrower (an index input in [0, its bound), see graph_io.tosa.index_bounds), floats standard
    normal."""
    arrays = []
    for name, shape, dtype in specs:
        if name in (bounds or {}):
            arrays.append(rng.integers(0, bounds[name], size=shape).astype(dtype))
        elif dtype is np.float32:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        elif dtype is np.bool_:
            arrays.append(rng.integers(0, 2, size=shape).astype(np.bool_))
        else:
            info = np.iinfo(dtype)
            low, high = (info.min, info.max) if span is None else (max(info.min, -span), min(info.max, span))
            arrays.append(rng.integers(low, high, size=shape, endpoint=True, dtype=dtype))
    return arrays


# Where full-range inputs make both sides' delegate unpredictable (an int32 input that overflows a RESCALE of stock's
# own quantization: funnel's attention on ethos-u55-128), the delegate is compared on integers within these spans,
# the widest both sides run; a layout moves values whatever they are, so any inputs both run show a misplaced one.
NARROWER_SPANS = (1 << 15, 1 << 7)


class ReferenceRejected(RuntimeError):
    """The TOSA reference model did not run a program; `status` is "unpredictable" or "error: ..."."""

    def __init__(self, path: Path, status: str):
        super().__init__(f"TOSA reference model rejected {Path(path).name}: {status}")
        self.status = status


# The reference model runs in a child process: on some programs it segfaults on inputs it accepts (text encoders'
# delegates on ethos-u85-256: camembert, data2vec-text, ibert, wavlm), and the comparison must live to say so.
_ISOLATED_REFERENCE = """
import os, pickle, sys
answer = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)  # what the reference model prints goes to stderr; stdout carries the answer alone
import numpy as np
import tosa_reference_model as reference
path, trials = pickle.load(sys.stdin.buffer)
program = open(path, "rb").read()
answers = []
for inputs in trials:
    try:
        outputs, status = reference.run(program, inputs)
    except Exception as exc:
        answers.append(("error", f"error: {type(exc).__name__}: {exc}".splitlines()[0][:300]))
        break
    name = str(status).split(".")[-1]
    if name != "TOSA_VALID":
        answers.append(("error", "unpredictable" if name == "TOSA_UNPREDICTABLE" else f"error: {name}"))
        break
    answers.append(("ok", [np.asarray(o) for o in outputs]))
pickle.dump(answers, answer)
answer.flush()
"""


def run_tosa_trials(path: Path, trials: list[list[np.ndarray]], timeout: float = 600.0) -> list[list[np.ndarray]]:
    """The outputs of one TOSA flatbuffer on the reference model for each input list in `trials`, in one child
    process (it imports only numpy and the reference model); raises ReferenceRejected at the first run that is
    not valid, or where the reference model crashes or runs past `timeout` seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", _ISOLATED_REFERENCE], input=pickle.dumps((str(path), trials)),
                              capture_output=True, timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ReferenceRejected(path, f"error: the reference model ran past {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise ReferenceRejected(path, f"error: the reference model crashed ({how_it_ended(done.returncode)})")
    outputs = []
    for status, found in pickle.loads(done.stdout):
        if status != "ok":
            raise ReferenceRejected(path, found)
        outputs.append(found)
    return outputs


def run_tosa(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of one TOSA flatbuffer on the reference model; raises ReferenceRejected unless it is valid."""
    return run_tosa_trials(path, [inputs])[0]


@dataclass
class Equivalence:
    """`equivalent` is None when it could not be checked delegate by delegate (a side the reference model
    rejects, or partitions that differ); the per-side `reference` status is "ok", "unpredictable" or "error: ..."."""

    equivalent: bool | None
    max_abs_diff: float | None
    delegates: int
    notes: list[str]
    reference: dict[str, str] = field(default_factory=lambda: {"left": "ok", "right": "ok"})


def compare_lowerings(left: list[Path], right: list[Path], trials: int = 3, seed: int = 0) -> Equivalence:
    """Run both lowerings' delegates on the same random inputs; equal outputs (exactly) or not.

    Each side runs on its own, so a program the reference model rejects is recorded against that side
    and the comparison says it could not be checked instead of failing."""
    # Delegates that cannot be paired (partitions that differ: a transpose stock leaves on the CPU that the
    # stage's layout lets the NPU take) are not compared here: None, and the caller compares the whole programs.
    if len(left) != len(right):
        return Equivalence(None, None, 0, [f"partitions differ: {len(left)} vs {len(right)} delegates"])
    rng = np.random.default_rng(seed)
    worst, notes = 0.0, []
    reference = {"left": "ok", "right": "ok"}
    for a, b in zip(left, right):
        specs_a, specs_b = tosa_inputs(a), tosa_inputs(b)
        if [(s[1], s[2]) for s in specs_a] != [(s[1], s[2]) for s in specs_b]:
            return Equivalence(None, None, len(left), [f"partitions differ: {a.name}'s inputs {specs_a} vs {specs_b}"])
        bounds = index_bounds(Path(a).read_bytes())
        outs, rejected = _run_both(a, b, [random_inputs(specs_a, rng, bounds) for _ in range(trials)], reference)
        if rejected and {r.status for r in rejected.values()} == {"unpredictable"} and len(rejected) == 2:
            for span in NARROWER_SPANS:  # a property of the program both sides share: narrower inputs
                narrow = [random_inputs(specs_a, rng, bounds, span) for _ in range(trials)]
                outs, again = _run_both(a, b, narrow, reference)
                if not again:
                    notes.append(f"{a.name}: compared on integer inputs within ±{span}: on full-range inputs the "
                                 f"reference model calls both sides unpredictable")  # fmt: skip
                    rejected = {}
                    break
        for side, exc in rejected.items():
            reference[side] = exc.status
            notes.append(str(exc))
        if len(outs) < 2:
            continue
        trials_a, trials_b = outs["left"], outs["right"]
        if any(len(x) != len(y) for x, y in zip(trials_a, trials_b)) or sorted(o.shape for o in trials_a[0]) != sorted(
            o.shape for o in trials_b[0]
        ):
            return Equivalence(None, None, len(left), [f"partitions differ: {a.name}'s output shapes"], reference)
        pairing = output_pairing(trials_a, trials_b)
        if pairing is None and _same_shaped(specs_a, trials_a[0]):
            # Two programs list a delegate's inputs and outputs in the order of its nodes, which stock's fusion
            # order can change (swinv2 on ethos-u85-256: two pairs of same-shaped outputs swapped in one process
            # and not in another); with tensors of one shape, position alone cannot say which is which.
            note = f"{a.name}: tensors of one shape among its inputs or outputs, listed in another order: not paired"
            return Equivalence(None, None, len(left), [note], reference)
        if pairing is None:  # every output's shape is its own: paired by shape, and the values differ
            shapes = [o.shape for o in trials_b[0]]
            pairing = [shapes.index(o.shape) for o in trials_a[0]]
        elif pairing != list(range(len(pairing))):
            notes.append(f"{a.name}: the same outputs in another order")
        for out_a, out_b in zip(trials_a, trials_b):
            for x, y in zip(out_a, (out_b[j] for j in pairing)):
                worst = max(
                    worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
                )
    if any(status != "ok" for status in reference.values()):
        return Equivalence(None, None, len(left), notes, reference)
    return Equivalence(worst == 0.0, worst, len(left), notes, reference)


def output_pairing(left: list[list[np.ndarray]], right: list[list[np.ndarray]]) -> list[int] | None:
    """For each of a delegate's outputs on one side (`left[trial][k]`), the output of the other side that equals it
    in every trial (same shape, same values): positions first, so a delegate whose outputs agree in place pairs as
    it is listed; None if some output has no such partner.

    >>> x, y = np.zeros(2), np.ones(2)
    >>> output_pairing([[x, y]], [[y, x]]), output_pairing([[x, y]], [[x, y]]), output_pairing([[x, x]], [[x, y]])
    ([1, 0], [0, 1], None)
    """
    count = len(left[0])
    free = list(range(count))
    pairing = []
    for k in range(count):
        order = [k] + [j for j in free if j != k] if k in free else free
        match = next(
            (
                j
                for j in order
                if all(t[k].shape == u[j].shape and np.array_equal(t[k], u[j]) for t, u in zip(left, right))
            ),
            None,
        )
        if match is None:
            return None
        free.remove(match)
        pairing.append(match)
    return pairing


def _same_shaped(input_specs, outputs: list[np.ndarray]) -> bool:
    """Whether two of a delegate's inputs share a shape and type, or two of its outputs a shape."""
    inputs = [(tuple(shape), dtype) for _, shape, dtype in input_specs]
    shapes = [o.shape for o in outputs]
    return len(set(inputs)) < len(inputs) or len(set(shapes)) < len(shapes)


def _run_both(a: Path, b: Path, inputs: list, reference: dict) -> tuple[dict, dict[str, ReferenceRejected]]:
    """Each side's outputs on `inputs` (sides the reference model already rejected are left out), and the
    rejections."""
    outs, rejected = {}, {}
    for side, path in (("left", a), ("right", b)):
        if reference[side] != "ok":
            continue
        try:
            outs[side] = run_tosa_trials(path, inputs)
        except ReferenceRejected as exc:
            rejected[side] = exc
    return outs, rejected


# --- against the quantized eager model -----------------------------------------------------------------------------

# ExecuTorch's TOSA/Ethos-U INT test pipelines compare a lowered program with the quantized eager model at
# torch.allclose(atol=1e-3 + QTOL * output scale, rtol=1e-3) (backends/arm/test/tester/test_pipeline.py).
ATOL, RTOL, QTOL = 1e-3, 1e-3, 1


@dataclass
class EagerCheck:
    """One lowered program against the quantized eager model on the same inputs: the largest absolute
    difference, the same in output quantization steps, and whether every output is within executorch's
    INT tolerance. `status` is "ok" or why the program could not be run. `outputs`: the program's outputs
    (flattened), kept so two programs run on the same example inputs can be compared with each other."""

    status: str
    max_abs_diff: float | None = None
    max_quant_steps: float | None = None
    within_tolerance: bool | None = None
    outputs: list | None = field(default=None, repr=False)

    def fields(self) -> dict:
        """The check as a comparison side's fields (layout_solver.compare.result.Side)."""
        return {
            "eager_check": self.status,
            "max_abs_diff_vs_eager": self.max_abs_diff,
            "eager_quant_steps": self.max_quant_steps,
            "eager_within_tolerance": self.within_tolerance,
        }


def versus_quantized_eager(quantized, lowered, tosa_files: list[Path], inputs: tuple, reference=None) -> EagerCheck:
    """Run `lowered` (an EdgeProgramManager from to_edge_transform_and_lower) with each delegate executed by
    the TOSA reference model on its kept .tosa (`tosa_files`, one per delegate) and the CPU ops in eager, and
    compare its outputs with the `quantized` exported program's (`reference`: those outputs, if already run)."""
    if reference is None:
        reference = quantized.module()(*inputs)
    try:
        with KeptTosaDispatch(tosa_files) as dispatch:
            outputs = lowered.exported_program().module()(*inputs)
        if dispatch.unused:
            raise RuntimeError(f"the program never called the delegates of {[p.name for p in dispatch.unused]}")
    except ReferenceRejected as exc:
        return EagerCheck(exc.status)
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        return EagerCheck(f"error: {type(exc).__name__}: {exc}".splitlines()[0][:300])
    reference, outputs = torch.utils._pytree.tree_leaves(reference), torch.utils._pytree.tree_leaves(outputs)
    qparams = list(get_output_quantization_params(quantized.graph_module.graph.output_node()).values())
    worst, steps, within = 0.0, 0.0, True
    for i, (ref, out) in enumerate(zip(reference, outputs)):
        scale = getattr(qparams[i], "scale", None) if i < len(qparams) else None
        diff = float((ref.double() - out.double()).abs().max()) if ref.numel() else 0.0
        worst = max(worst, diff)
        if scale:
            steps = max(steps, diff / float(scale))
        atol = ATOL + (float(scale) * QTOL if scale else 0.0)
        within &= bool(torch.allclose(out.to(ref.dtype), ref, atol=atol, rtol=RTOL))
    return EagerCheck("ok", worst, round(steps, 3), within, outputs)


def same_outputs(left: EagerCheck, right: EagerCheck) -> tuple[bool | None, float | None]:
    """(bit-exact?, max abs diff) of two programs' outputs from their eager checks on the same example
    inputs; (None, None) when either could not be run. The fallback for equivalence when the reference
    model refuses the random inputs of compare_lowerings but runs the example inputs."""
    if left.outputs is None or right.outputs is None:
        return None, None
    if len(left.outputs) != len(right.outputs):
        return False, None
    worst = 0.0
    for a, b in zip(left.outputs, right.outputs):
        if a.shape != b.shape:
            return False, None
        if a.numel():
            worst = max(worst, float((a.double() - b.double()).abs().max()))
    return worst == 0.0, worst


def stock_against_solver(stock: list[Path], solver: list[Path], checks: dict[str, EagerCheck]) -> dict:
    """A comparison's equivalence fields: the two lowerings delegate by delegate on random inputs
    (compare_lowerings); where that could not be checked (the reference model rejected a side, or the partitions
    differ), the two whole programs' outputs on the example inputs (`checks`: each side's eager check), bit for bit."""
    same = compare_lowerings(stock, solver)
    fields = {
        "equivalent": same.equivalent,
        "max_abs_diff": same.max_abs_diff,
        "stock_reference": same.reference["left"],
        "solver_reference": same.reference["right"],
    }
    if same.notes:
        fields["equivalence_notes"] = same.notes
    if same.equivalent is None:
        exact, diff = same_outputs(checks["stock"], checks["solver"])
        if exact is not None:
            fields.update(equivalent_on_example_inputs=exact, max_abs_diff_on_example_inputs=diff)
    return fields


def _input_signature(path: Path) -> list[tuple[tuple[int, ...], type]]:
    return [(tuple(shape), dtype) for _, shape, dtype in tosa_inputs(path)]


class KeptTosaDispatch(TosaReferenceModelDispatch):
    """executorch's TOSA reference-model dispatch (it runs call_delegate on the reference model and the Q/DQ ops
    as its tests do), fed the .tosa each Ethos-U delegate was compiled from: an Ethos-U delegate carries Vela's
    command stream instead. A delegate's .tosa is the one named after its partition tag ("output_tag3_..."), as
    the Arm backend dumps them, or an untagged one ("output_TOSA-...": a delegate whose nodes carried no tag
    when it was compiled, such as one of constants only); either way its inputs must be what the call passes."""

    def __init__(self, tosa_files: list[Path]):
        super().__init__()
        self.unused = list(tosa_files)
        self.signature = {p: _input_signature(p) for p in self.unused}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is not torch._higher_order_ops.executorch_call_delegate:
            return super().__torch_function__(func, types, args, kwargs)
        tag = arm_get_first_delegation_tag(args[0].original_module.graph_module)
        arrays = [torch_tensor_to_numpy(t) for t in args[1:]]
        passed = [(a.shape, a.dtype.type) for a in arrays]
        named = [p for p in self.unused if tag and p.name.startswith(f"output_{tag}_")]
        candidates = named or [p for p in self.unused if p.name.startswith("output_TOSA-")]
        path = next((p for p in candidates if self.signature[p] == passed), None)
        if path is None:
            raise RuntimeError(f"no kept .tosa for the delegate of partition {tag or '(untagged)'} reading {passed}")
        self.unused.remove(path)
        self.ran_tosa_dispatch = True
        output_node = args[0].original_module.graph.output_node()
        outputs = tuple(numpy_to_torch_tensor(r, n) for r, n in zip(run_tosa(path, arrays), output_node.args[0]))
        for k, (out, node) in enumerate(zip(outputs, output_node.args[0])):
            declared = node.meta["val"].dtype
            if out.dtype != declared:  # the program would hand its next op bytes of another type
                raise RuntimeError(
                    f"delegate {tag or '(untagged)'} output {k} ({node.name}): the program declares {declared}, "
                    f"its TOSA graph writes {out.dtype}"
                )
        return outputs
