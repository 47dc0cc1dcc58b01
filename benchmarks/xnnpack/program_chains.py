"""Chains of layers the calibration does not probe, predicted against measured at 1 and 2 threads.

Run: .venv/bin/python -m benchmarks.xnnpack.program_chains [--profile host|NAME|FILE] [--rounds 20] [--passes 2]
     [--out FILE]

Each chain is lowered and timed as the calibration times its own chains of a program's layers
(`calibrate_ops.run_probe`: ETDump's kernels, then the run against the reference program, each after its twin),
`--passes` times, the median kept (`calibrate_ops.merged`), stated at the profile's reference speed. The chains
differ from the calibration's in what they stress: weights far beyond the caches (64 MiB of matrices, read once
per run), few rows per matrix (a weight-bound product, as a decode step's), small products of a decode step's
size, and convolutions at a program's spatial sizes. Where these miss and the calibration's chains do not, the cost model lacks a term the programs pay.
"""

from __future__ import annotations

from benchmarks import harness


def chains() -> list[tuple[str, object, int, tuple[int, ...]]]:
    """(name, layer maker, layers, input shape) of each chain; each layer its own weights."""
    import torch

    def block(channels):
        return torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU())

    return [
        ("gemm 8 x 384, 196 rows (4.5 MiB of weights)", lambda: torch.nn.Linear(384, 384), 8, (196, 384)),
        ("gemm 16 x 1024, 196 rows (64 MiB)", lambda: torch.nn.Linear(1024, 1024), 16, (196, 1024)),
        ("gemm 16 x 1024, 16 rows (64 MiB)", lambda: torch.nn.Linear(1024, 1024), 16, (16, 1024)),
        ("conv 8 x 256 at 7x7 (18 MiB)", lambda: block(256), 8, (1, 256, 7, 7)),
        ("conv 8 x 64 at 56x56 (1.2 MiB)", lambda: block(64), 8, (1, 64, 56, 56)),
        # Small products, each split across the pool at 2 threads, as a decode step's projections are.
        ("gemm 12 x 128, 1 row (0.8 MiB)", lambda: torch.nn.Linear(128, 128), 12, (1, 128)),
        ("gemm 12 x 128, 8 rows (0.8 MiB)", lambda: torch.nn.Linear(128, 128), 12, (8, 128)),
    ]


def main() -> None:
    from cost_models import xnnpack as xnn_cost
    from layout_solver.targets.xnnpack import calibrate_ops, op_probes
    from layout_solver.targets.xnnpack.clock import at_reference_speed

    args = harness.parser(__doc__)
    args.add_argument("--profile", default="host", help="an XNNPACK profile: a built-in name or file")
    args.add_argument("--rounds", type=int, default=20)
    args.add_argument("--passes", type=int, default=2)
    opts = args.parse_args()
    profile = xnn_cost.load_profile(opts.profile)
    threads = [int(n) for n in profile.reference_us]
    probes = [op_probes.Probe(name, None, op_probes._layer_chain(make, count, shape), kernel_bound=True)
              for name, make, count, shape in chains()]  # fmt: skip
    lowered = {p.name: calibrate_ops.lower_probe(p) for p in probes}
    runs = []
    for k in range(opts.passes):
        for probe in probes:
            runs += calibrate_ops.run_probe(probe, threads, opts.rounds, lowered[probe.name])
            print(f"[pass {k + 1}/{opts.passes}] {probe.name}", flush=True)
    reference = at_reference_speed(runs)
    rows = []
    for r in calibrate_ops.merged(runs):
        scale = profile.reference_us[str(r.threads)] / reference[str(r.threads)]  # at the profile's speed
        run, kernels = r.run_us * scale, sum(r.kernel_us.values()) * scale
        predicted = xnn_cost.run_us(profile, r.ops, r.delegates, r.threads, r.io_kib)
        kernels_predicted = predicted["total"] - predicted["overhead"]
        rows.append((r.probe.name, r.threads, f"{run:,.0f}", f"{kernels:,.0f}", f"{run / kernels - 1:.0%}",
                     f"{predicted['total']:,.0f}", f"{predicted['total'] / run - 1:+.0%}",
                     f"{kernels_predicted / kernels - 1:+.0%}"))  # fmt: skip
    header = ["chain", "threads", "run us", "kernels us", "run beyond kernels", "predicted us", "error",
              "kernels' error"]  # fmt: skip
    lines = ["# XNNPACK chains beyond the calibration's", "", harness.provenance(), "",
             f"Reference program this run: {reference} us; the profile's: {profile.reference_us} us.", "",
             *harness.table(header, sorted(rows, key=lambda row: (row[0], row[1])))]  # fmt: skip
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
