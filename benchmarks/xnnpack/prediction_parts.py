"""Where the XNNPACK run-time prediction misses: per model, each op class's predicted time against ETDump's.

Run: .venv/bin/python -m benchmarks.xnnpack.prediction_parts --models swin_like,decoder_stack [--threads 1]
     [--profile host|NAME|FILE] [--int8] [--rounds 30] [--out FILE]

Per model: stock's program (lowered inside `stock_layouts`), its predicted microseconds by part
(`predicted_run`), and ETDump's kernels of the same program by the same classes (each run after its twin's, as
the calibration and a paired timing run it), both at the profile's speed (the measured times scaled by the
profile's reference over the reference program's time in the same rounds). The whole run's gap is the sum of
the parts' gaps and the run beyond the kernels ("overhead"). The benchmark's own prediction figure is
`benchmarks.xnnpack.zoo`'s; this says which class makes it.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict

from benchmarks import harness

# ETDump's event names -> the predictor's op classes (cost_models.xnnpack.OP_CLASSES), first match wins.
EVENT_CLASSES = (
    (re.compile(r"^Convolution .*DWConv"), "dwconv"),
    (re.compile(r"^(Convolution|Deconvolution)"), "conv"),
    (re.compile(r"^Fully Connected"), "gemm"),
    (re.compile(r"^Batch Matrix Multiply"), "bmm"),
    (re.compile(r"^Softmax"), "softmax"),
    (re.compile(r"^Transpose"), "conversion"),
    (re.compile(r"^(Copy|Concatenate|Slice|Constant Pad|Static Reshape)"), "copy"),
    (re.compile(r"^(Max Pooling|Average Pooling|Global|Mean|Max)"), "pool"),
    (re.compile(r"^Resize"), "resize"),
    (re.compile(r"^(GELU|Sigmoid|Tanh|ELU|Exp|Log|Square Root|Reciprocal Square Root|HardSwish|Leaky ReLU)"),
     "transcendental"),
    # An int8 program's unary op (its GELU here) is named so by the profiler of executorch 1.5.1's XNNPACK.
    (re.compile(r"^Invalid Unary Op"), "transcendental"),
    (re.compile(r"^Convert"), "convert"),
)  # fmt: skip


def event_class(name: str) -> str:
    """The predictor's class of one ETDump event class ("native_call_layer_norm.out" -> "cpu:layer_norm")."""
    if name.startswith("native_call_"):
        return "cpu:" + name.removeprefix("native_call_").split(".")[0]
    for pattern, op_class in EVENT_CLASSES:
        if pattern.match(name):
            return op_class
    return "elementwise"


def predicted_class(part: str) -> str:
    """A prediction part's class as `event_class` names it: a CPU kernel's without its order
    ("cpu:x@channels_last" -> "cpu:x"), any other its family ("dwconv:9" -> "dwconv")."""
    from cost_models.xnnpack import CPU_PREFIX, op_family

    return part.split("@")[0] if part.startswith(CPU_PREFIX) else op_family(part)


def model_parts(name: str, threads: int, profile, int8: bool, rounds: int) -> dict[str, tuple[float, float]]:
    """{class: (predicted us, measured us at the profile's speed)}, with "overhead" and "total"."""
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.calibrate_ops import BOOKKEEPING
    from layout_solver.targets.xnnpack.clock import reference_ratio, run_twin
    from layout_solver.targets.xnnpack.cpu_ops import CpuOpTimes
    from layout_solver.targets.xnnpack.lowering import lower, predicted_run, quantize
    from layout_solver.targets.xnnpack.runtime import _INSTANCE, etdump_events, per_run_ms
    from layout_solver.xnnpack import stock_layouts
    from layout_solver.zoo.models import build

    module, inputs = build(name)
    with quiet():
        if int8:
            module = quantize(module, inputs)
        lowered = lower(module, inputs, lambda: stock_layouts(profile, threads))
    predicted = predicted_run(lowered, profile, threads, CpuOpTimes())
    ratio, reference_ms = reference_ratio(lowered.buffer, inputs, threads, rounds)
    scale = profile.reference_us[str(threads)] / (reference_ms * 1e3)
    run_us = ratio * profile.reference_us[str(threads)]
    events = etdump_events(lowered.buffer, inputs, threads, rounds, between=run_twin(lowered.buffer, inputs, threads))
    measured: dict[str, float] = defaultdict(float)
    for event, raw in events.items():
        if event not in BOOKKEEPING:
            measured[event_class(_INSTANCE.sub("", event))] += per_run_ms(raw, rounds) * 1e3 * scale
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for part, us in predicted.items():
        if part not in ("total", "overhead"):
            out[predicted_class(part)][0] += us
    for op_class, us in measured.items():
        out[op_class][1] += us
    out["overhead"] = [predicted["overhead"], run_us - sum(measured.values())]
    out["total"] = [predicted["total"], run_us]
    return {k: (p, m) for k, (p, m) in out.items()}


def main() -> None:
    from cost_models import xnnpack as xnn_cost

    args = harness.parser(__doc__)
    args.add_argument("--models", default="swin_like,decoder_stack,resnet8")
    args.add_argument("--threads", type=int, default=1)
    args.add_argument(
        "--profile",
        default="host",
        help="an XNNPACK profile: a built-in name or file (default: the built-in measured on this CPU)",
    )
    args.add_argument("--int8", action="store_true")
    args.add_argument("--rounds", type=int, default=30)
    opts = args.parse_args()
    profile = xnn_cost.load_profile(opts.profile)
    if str(opts.threads) not in profile.reference_us:
        raise SystemExit(f"the profile has no reference time at {opts.threads} thread(s)")
    lines = [f"# XNNPACK prediction by op class, {opts.threads} thread(s)", "", harness.provenance(), ""]
    errors = []
    for i, name in enumerate(opts.models.split(","), 1):
        parts = model_parts(name, opts.threads, profile, opts.int8, opts.rounds)
        predicted, measured = parts["total"]
        errors.append(abs(predicted / measured - 1))
        print(f"[{i}] {name}: predicted {predicted:.1f} us, measured {measured:.1f} us", flush=True)
        lines += [f"## {name}: predicted {predicted:.1f} us, measured {measured:.1f} us ({predicted / measured - 1:+.0%})",
                  ""]  # fmt: skip
        ranked = sorted(parts.items(), key=lambda kv: -max(kv[1]))
        lines += harness.table(
            ["class", "predicted us", "measured us", "predicted - measured"],
            [(k, f"{p:.1f}", f"{m:.1f}", f"{p - m:+.1f}") for k, (p, m) in ranked if max(p, m) >= 1.0],
        )
        lines.append("")
    lines.append(f"Median |error| of the whole run over {len(errors)} models: {statistics.median(errors):.1%}")
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
