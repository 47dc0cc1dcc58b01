"""What the lowering produces, as hashes: did a refactor change any program?

Run: .venv/bin/python benchmarks/fingerprint.py OUT.json --target TARGET (ethos-u55-128, ethos-u85-256, vulkan,
     xnnpack, xnnpack-int8) [--models a,b]
     .venv/bin/python benchmarks/fingerprint.py --diff BEFORE.json AFTER.json

Per zoo model and side (stock, solver): Vulkan and XNNPACK, the .pte's sha256, transitions, modelled cost and objective;
Ethos-U, every delegate's .tosa sha256, the Vela metrics (lowering time left out) and the solver reports'
objective / permutes inserted / removed. Two fingerprints taken before and after a change that should not
change behaviour must be equal (the #13 redesign was checked this way: equal on all 12 zoo models).

Each delegate has two digests: `tosa`, of its bytes, and `program`, of its operators with names and order left
out (`program_digest`). executorch 1.5.1 can lower the same graph in another topological order from one process
to the next, which renumbers its nodes (resnet8's stock program came out as two byte-strings in three runs of
the same code: its 1x1 shortcut convolution and a 3x3 one swap names, every Vela figure equal): equal `program`
digests and Vela metrics with unequal `tosa` ones are that, not a change.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

from layout_solver.lowering.quiet import quiet
from layout_solver.targets import get_target, target_names
from layout_solver.zoo.models import ZOO, build


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def program_digest(path: Path) -> str:
    """A digest of the TOSA program in `path` that names and orders nothing: the multiset of its operators, each
    as (op, its operands' and results' shape, dtype and constant data)."""
    import tosa_serializer

    graph = tosa_serializer.TosaSerializer("")
    if not graph.loadTosaFlatbuffer(str(path)):
        raise ValueError(f"cannot read TOSA flatbuffer {path}")
    ops = []
    for region in graph.regions:
        for block in region.basicBlocks:
            facts = {
                n: (list(t.shape), str(t.dtype), _sha(bytes(t.data))) for n in block.tensors if (t := block.tensors[n])
            }
            ops += [
                repr((str(o.op), [facts.get(n, n) for n in o.inputs], [facts.get(n, n) for n in o.outputs]))
                for o in block.operators
            ]
    return _sha("\n".join(sorted(ops)).encode())


def vulkan(module, inputs, _target: str) -> dict:
    from layout_solver.targets.vulkan.measure import lower_vulkan
    from layout_solver.vulkan import solver_layouts, stock_layouts

    record = {}
    for side, context in (("stock", stock_layouts), ("solver", solver_layouts)):
        program, reports = lower_vulkan(module, inputs, context)
        record[side] = {
            "pte": _sha(program),
            "transitions": sum(len(r.transitions) for r in reports),
            "modelled_us": round(sum(r.modelled_us for r in reports), 3),
            "objective": [r.objective for r in reports],
        }
    return record


def ethos_u(module, inputs, target: str) -> dict:
    from layout_solver.arm import solver_layouts
    from layout_solver.targets.ethos_u.measure import lower_ethos_u, quantize_for

    quantized = quantize_for(module, inputs, target)
    record = {}
    for side in ("stock", "solver"):
        context = solver_layouts() if side == "solver" else contextlib.nullcontext([])
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), context as reports:
            lowering = lower_ethos_u(module, inputs, target, keep_tosa=Path(tmp), quantized=copy.deepcopy(quantized))
            metrics = lowering.metrics()
            metrics.pop("lower_seconds")
            record[side] = {
                "tosa": [_sha(f.read_bytes()) for f in lowering.tosa_files],
                "program": [program_digest(f) for f in lowering.tosa_files],
                "metrics": metrics,
                "reports": [
                    [r.objective and round(r.objective, 1), r.transitions_written, r.ops_removed] for r in reports
                ],
            }
    return record


def xnnpack(module, inputs, target: str) -> dict:
    from layout_solver.targets.xnnpack.lowering import lower, quantize
    from layout_solver.xnnpack import solver_layouts, stock_layouts

    if target == "xnnpack-int8":
        module = quantize(module, inputs)
    record = {}
    for side, context in (("stock", stock_layouts), ("solver", solver_layouts)):
        lowered = lower(module, inputs, context)
        record[side] = {
            "pte": _sha(lowered.buffer),
            "objective": [r.objective and round(r.objective, 3) for r in lowered.reports],
        }
    return record


FINGERPRINTS = {"vulkan": vulkan, "ethos-u": ethos_u, "xnnpack": xnnpack}  # per target family


def diff(before: dict, after: dict) -> int:
    changed = sorted(m for m in before.keys() | after.keys() if before.get(m) != after.get(m))
    for model in changed:
        print(f"{model}: {json.dumps(before.get(model))}\n{' ' * len(model)}  {json.dumps(after.get(model))}")
    print(f"{len(before.keys() | after.keys()) - len(changed)} models equal, {len(changed)} differ")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?")
    parser.add_argument("--target", choices=target_names())
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.diff:
        return diff(*(json.loads(Path(p).read_text()) for p in args.diff))
    if not (args.out and args.target):
        parser.error("OUT and --target are needed (or --diff BEFORE AFTER)")
    result = {}
    with quiet():
        for name in args.models.split(","):
            module, inputs = build(name)
            result[name] = FINGERPRINTS[get_target(args.target).family](module, inputs, args.target)
            print(f"{name}: {json.dumps(result[name])[:160]}", file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
