"""Which XNNPACK operators run on the calling thread without the thread pool: after 200 us of a CPU kernel (the
pool's workers asleep), one delegate runs an elementwise operator of a given size and then a small matrix product.
Where the elementwise operator splits across the pool it pays the wake-up; where it runs on the calling thread the
product after it does. What `cost_models.xnnpack.splits_across_pool` and its `INLINE_ELEMENTWISE_BYTES` rest on.

ETDump's microseconds of each XNNPACK event at 1 and 2 threads (the mean of `--rounds` runs, the slowest tenth left
out); the product's output is 64 wide so its own time stays small beside the wake-up.

Run: .venv/bin/python -m benchmarks.xnnpack.pool_inline [--cases add:1x1024,bias:8x128,...] [--rounds 40] [--out FILE]
"""

from __future__ import annotations

from benchmarks import harness

# kind:ROWSxCOLUMNS. add: the input plus a scalar (XNNPACK merges every dim into one run of elements); bias: plus
# a vector of COLUMNS (ROWS rows of COLUMNS); sigmoid: the add, then a sigmoid of the same size.
CASES = "add:1x16,add:1x1024,add:1x4096,add:1x8192,add:1x16384,bias:2x64,bias:8x128,bias:64x16,sigmoid:1x4096"


def _module(kind: str, columns: int):
    import torch

    class ThenProduct(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.product, self.bias = torch.nn.Linear(columns, 64), torch.nn.Parameter(torch.randn(columns))

        def forward(self, big, x):
            ran = torch.cumsum(big, 0)  # on the CPU, long past the pool's spin
            y = x + ran[-1:, :1]  # the delegate's first operator after the cumsum: a one-element slice, then the add
            if kind == "bias":
                y = y + self.bias
            if kind == "sigmoid":
                y = torch.sigmoid(y)
            return ran, self.product(y)

    return ThenProduct().eval()


def times(kind: str, rows: int, columns: int, threads: int, rounds: int) -> dict[str, float]:
    """ETDump's microseconds of each XNNPACK operator of the case's program at `threads`, by event name."""
    import torch

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.lowering import lower
    from layout_solver.targets.xnnpack.runtime import etdump_events, trimmed_mean
    from layout_solver.xnnpack import stock_layouts

    torch.manual_seed(0)
    inputs = (torch.randn(256, 256), torch.randn(rows, columns))
    with quiet():
        buffer = lower(_module(kind, columns), inputs, stock_layouts).buffer
    events = etdump_events(buffer, inputs, threads, rounds)
    return {name: trimmed_mean(raw) * 1e3 for name, raw in events.items() if "#" in name}


def main() -> None:
    args = harness.parser(__doc__)
    args.add_argument("--cases", default=CASES)
    args.add_argument("--rounds", type=int, default=40)
    opts = args.parse_args()
    lines = ["# Which XNNPACK operators run without the thread pool", "", harness.provenance(), "",
             ("Microseconds (ETDump) of the elementwise operator and of the product after it, after a CPU kernel "
              "of 200 us. The one that reads about a wake-up more at 2 threads than at 1 is the one that split "
              "across the pool."), ""]  # fmt: skip
    rows = []
    for case in opts.cases.split(","):
        kind, shape = case.split(":")
        height, width = (int(d) for d in shape.split("x"))
        read = {n: times(kind, height, width, n, opts.rounds) for n in (1, 2)}

        def last_time(prefix: str, n: int, read=read) -> float:
            return [us for name, us in read[n].items() if name.startswith(prefix)][-1]

        elementwise = [last_time("Sigmoid" if kind == "sigmoid" else "Add", n) for n in (1, 2)]
        product = [last_time("Fully Connected", n) for n in (1, 2)]
        kib = height * width * 4 / 1024
        splits = elementwise[1] - elementwise[0] > product[1] - product[0]
        rows.append((case, f"{kib:g}", *(f"{us:.1f}" for us in (*elementwise, *product)),
                     "the elementwise op" if splits else "the product"))  # fmt: skip
        print(harness.row(rows[-1]), flush=True)
    lines += harness.table(["case", "output KiB (fp32)", "elementwise 1t", "elementwise 2t", "product 1t",
                            "product 2t", "pays the wake-up"], rows)  # fmt: skip
    harness.emit(lines, opts.out)


if __name__ == "__main__":
    main()
