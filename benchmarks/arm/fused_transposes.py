"""Ethos-U85 writes a TRANSPOSE as the output of the op before it: what that costs, measured with Vela 5.1.

Run: .venv/bin/python -m benchmarks.arm.fused_transposes [--out benchmarks/results/arm_fused_transposes.md]

Each row is one int8 producer (a full-range CLAMP, or a CONV2D with its int32 -> int8 RESCALE, reading a
CLAMP stand-in so its input is an intermediate as in a program) followed by TRANSPOSE(perm), compiled by Vela's
compiler core for ethos-u55-128 and ethos-u85-256 with executorch's flags. Columns: whether Vela gave the
convolution's TRANSPOSE no cycles of its own (written as the convolution's output), the transpose compiled alone
(a graph input into it), the producer alone, the producer then the transpose, and what the transpose adds there
("in place"); for the convolution also the same transpose written with its H and W merged between two reshapes
(the form `layout_solver.arm.canonical` writes where it is cheaper alone), which Vela does not fuse.

What it shows (issue 32, 2026-11-27): on Ethos-U85 the TRANSPOSE row reads 0 cycles and the work lands in the
producer's row, at anything from nothing to sixteen times the transpose alone (a [1, 4, 4, 256] convolution
result to channels-first); on Ethos-U55 the transpose runs on its own at its price alone. The stage prices a
transpose of a convolution's or pooling's result this way (`layout_solver.arm.probes.write_transpose_probes`:
the producer's probe with the transpose appended, less the probe without it; 2026-11-27, issue 32); a first try
that priced every producer so was backed out (benchmarks/results/arm_total.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cost_models import vela
from cost_models.tosa_probe import ProbeBuilder, clamp_through

TARGETS = ("ethos-u55-128", "ethos-u85-256")
CASES = [  # (NHWC shape, output channels of the convolution, perm)
    ((1, 16, 16, 64), 64, (0, 3, 1, 2)),
    ((1, 16, 16, 64), 64, (0, 2, 1, 3)),
    ((1, 8, 8, 128), 128, (0, 3, 1, 2)),
    ((1, 4, 4, 256), 256, (0, 3, 1, 2)),
    ((1, 4, 4, 96), 96, (0, 3, 1, 2)),
    ((1, 4, 1, 128), 128, (0, 3, 2, 1)),
    ((1, 32, 32, 8), 8, (0, 3, 1, 2)),
]


def _transpose(b: ProbeBuilder, x: int, shape, perm) -> int:
    index, _ = b.op("TRANSPOSE", [x], [shape[p] for p in perm], "int8", "TransposeAttribute", perms=tuple(perm))
    return index


def _reshape(b: ProbeBuilder, x: int, shape) -> int:
    return b.op("RESHAPE", [x, b.const(list(shape), "shape")], list(shape), "int8", "ReshapeAttribute")[1]


def _cycles(build, config) -> int:
    b = ProbeBuilder()
    build(b)
    return vela.compile_probe(b.build(), config).cycles


def _transpose_row_is_empty(build, config) -> bool:
    """Whether Vela gives the TRANSPOSE `build` returns (an operator index) no cycles of its own: it was
    written as its producer's output."""
    b = ProbeBuilder()
    index = build(b)
    graph = b.build()
    return vela.compile_probe(graph, config).cycles_of([graph.tosa_index(index)]) == 0


def measure(shape, out_channels: int, perm, config) -> dict[str, int]:
    """The cycles of each form of one case on one configuration, and whether the convolution's transpose row
    was empty ("fused")."""
    out = (*shape[:3], out_channels)
    source = lambda b: clamp_through(b, b.input(shape, "int8"), shape, "int8")  # the producers' input
    conv_then_transpose = lambda b: _transpose(b, vela.conv_then_rescale(b, source(b), shape, out_channels), out, perm)
    row = {
        "alone": vela.compile_probe(vela.transpose_probe(out, perm), config).cycles,
        "clamp": _cycles(lambda b: clamp_through(b, b.input(out, "int8"), out, "int8"), config),
        "clamp+T": _cycles(
            lambda b: _transpose(b, clamp_through(b, b.input(out, "int8"), out, "int8"), out, perm), config
        ),
        "conv": _cycles(lambda b: vela.conv_then_rescale(b, source(b), shape, out_channels), config),
        "conv+T": _cycles(conv_then_transpose, config),
        "fused": _transpose_row_is_empty(conv_then_transpose, config),
    }
    if perm == (0, 3, 1, 2) and out[1] * out[2] > 1 and 1 not in out[1:3]:
        n, h, w, c = out
        merged = lambda b: _transpose(b, _reshape(b, vela.conv_then_rescale(b, source(b), shape, c), (n, h * w, c)),
                                      (n, h * w, c), (0, 2, 1))  # fmt: skip
        row["conv+reshape+T"] = _cycles(merged, config)
    return row


def main(argv=None) -> None:
    """Measure every case on both targets and write the table."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/arm_fused_transposes.md")
    args = parser.parse_args(argv)
    lines = [
        "# Ethos-U85 writes a TRANSPOSE as its producer's output (Vela " + vela.vela_version() + ", int8)",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        (
            "| target | conv's transpose row empty | result (NHWC) | perm | T alone | clamp | clamp+T (in place) | conv |"
            " conv+T (in place) | conv+reshape+T |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target in TARGETS:
        config = vela.vela_config(tuple(EthosUCompileSpec(target).compiler_flags))
        for shape, channels, perm in CASES:
            r = measure(shape, channels, perm, config)
            lines.append(
                f"| {target} | {'yes' if r['fused'] else 'no'} | {(*shape[:3], channels)} | {perm} | {r['alone']:,} | "
                f"{r['clamp']:,} | {r['clamp+T']:,} ({r['clamp+T'] - r['clamp']:+,}) | {r['conv']:,} | "
                f"{r['conv+T']:,} ({r['conv+T'] - r['conv']:+,}) | "
                f"{'' if 'conv+reshape+T' not in r else format(r['conv+reshape+T'], ',')} |"
            )
            print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
