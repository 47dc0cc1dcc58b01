"""Fitting a CPU's XNNPACK op costs from its probes' measurements (`calibrate xnnpack`'s run-time half): each op
class's curve of time by work, the per-unit costs beyond it, the tiles XNNPACK packs a GEMM's weights in, and what
reading a program's weights from memory costs beyond the cache.
Its conversion half: each conversion class's curve of time by size, and the tiles XNNPACK's transpose kernel moves.
Pure: measurements in (`cost_models.xnnpack.OpMeasurement`, `cost_models.xnnpack.Measurement`), the profile's
tables out."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from cost_models import xnnpack as xnn_cost

OpCurves = dict[str, dict[str, dict[str, xnn_cost.WorkCurve]]]
UnitCosts = dict[str, dict[str, dict[str, float]]]
Packing = dict[str, dict[str, tuple[int, int]]]
ConversionCurves = dict[str, dict[str, dict[str, xnn_cost.Curve]]]

# The kr and nr XNNPACK's microkernels are built with (powers of two, up to a 16-wide tile); its transpose kernels'
# tiles likewise.
CANDIDATE_TILES = (1, 2, 4, 8, 16)
# ETDump resolves 1 us: a probe under 2 us says little of its rate.
MIN_FIT_US = 2.0


def packing(measurements: list[xnn_cost.OpMeasurement]) -> Packing:
    """Per thread count and element size: the tiles (kr, nr) under which the conv and gemm probes' microseconds
    per packed multiply-add agree best (the least sum of absolute deviations of their logs from each family's
    median; on a tie the smaller tiles). Their rate is flat over sizes once the ops are past a few microseconds
    (this EPYC's int8 convolutions 198-233 multiply-adds per ns from 0.6 to 151 million), so a probe whose input
    or output channels are not a multiple of the tile stands out by the padding its kernel runs.

    A CPU's microkernel, so its tiles, is one per element size whatever the threads: they are read at the fewest
    threads measured and stated for every thread count. At more, how the work splits between the threads adds
    steps of its own (this EPYC at 2 threads: fp32 convolutions of 4, 8 and 12 output channels 240, 293 and
    185 us, one 16-wide tile each)."""
    by_elem: dict[int, list[xnn_cost.OpMeasurement]] = defaultdict(list)
    for m in measurements:
        packed = m.gemm is not None and xnn_cost.op_family(m.op_class) in xnn_cost.PACKED_FAMILIES
        if packed and m.us >= MIN_FIT_US and not m.footprint_kib:
            by_elem[m.elem_bytes].append(m)
    out: Packing = defaultdict(dict)
    for elem, mine in sorted(by_elem.items()):
        fewest = min(m.threads for m in mine)
        alone = [m for m in mine if m.threads == fewest]
        best = min(
            itertools.product(CANDIDATE_TILES, CANDIDATE_TILES), key=lambda tiles: (_spread(alone, tiles), tiles)
        )
        for threads in sorted({m.threads for m in measurements}):
            out[str(threads)][str(elem)] = best
    return dict(out)


def _spread(measurements: list[xnn_cost.OpMeasurement], tiles: tuple[int, int]) -> float:
    """The sum over the conv and gemm families of the absolute deviations of log(us per packed multiply-add)
    from the family's median."""
    total = 0.0
    for family in xnn_cost.PACKED_FAMILIES:
        rates = np.log([m.us / xnn_cost.packed_work(m.gemm, tiles) for m in measurements
                        if xnn_cost.op_family(m.op_class) == family])  # fmt: skip
        if len(rates):
            total += float(np.abs(rates - np.median(rates)).sum())
    return round(total, 9)


def work_of(m: xnn_cost.OpMeasurement, tiles: Packing | None) -> float:
    """The work a measurement is filed under on its class's curve: a GEMM's packed multiply-adds where the tiles
    of its thread count and element size are known, else its own."""
    found = (tiles or {}).get(str(m.threads), {}).get(str(m.elem_bytes))
    return xnn_cost.work_packed(m.op_class, m.work, m.gemm, found)


def op_curves(measurements: list[xnn_cost.OpMeasurement], tiles: Packing | None = None) -> tuple[OpCurves, UnitCosts]:
    """Per (threads, element bytes, class): microseconds by work (`_curves`), and for a class in OP_UNITS the
    microseconds per unit beyond its curve (`_unit_costs`, from its unit probes); the probes made to read the
    tiles are not on any curve (at 2 threads this EPYC's fp32 convolution of 1 input channel ran at about half its
    neighbours' rate, packed or not, where 1 thread read it on the curve). The two are fitted in turn twice:
    the curve's probes pay a little per unit too (a softmax of 1,024-element rows), taken off before their curve."""
    on_curve = [m for m in measurements if not m.unit_probe and not m.tile_probe and not m.footprint_kib]
    unit_probes = [m for m in measurements if m.unit_probe]
    unit_us: UnitCosts = {}
    for _ in range(2):
        curves = _curves(on_curve, unit_us, tiles)
        unit_us = _unit_costs(unit_probes, curves)
    return curves, unit_us


def _curves(measurements: list[xnn_cost.OpMeasurement], unit_us: UnitCosts, tiles: Packing | None) -> OpCurves:
    """Per (threads, element bytes, class): microseconds by work (a GEMM's packed in `tiles`; what each probe's
    units cost taken off), each point's rate (microseconds per unit of work) the median of its own and its neighbours' (a probe of an odd
    shape, a 3-channel convolution or a 4 MiB weight matrix, would otherwise bend the curve for every op between
    its neighbours: resnet8's convolutions priced 40% over), made non-decreasing; "cpu:other" is the CPU's
    element-wise add (a kernel the profile has no curve for is priced as one)."""
    groups: dict[tuple[int, int, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in measurements:
        per_unit = unit_us.get(str(m.threads), {}).get(str(m.elem_bytes), {}).get(m.op_class, 0.0)
        groups[(m.threads, m.elem_bytes, m.op_class)][work_of(m, tiles)].append(max(0.0, m.us - per_unit * m.units))
    out: dict[str, dict[str, dict[str, xnn_cost.WorkCurve]]] = defaultdict(lambda: defaultdict(dict))
    for (threads, elem, op_class), by_work in sorted(groups.items()):
        work = np.array(sorted(w for w in by_work if w > 0))
        if not len(work):
            continue
        rate = np.array([float(np.median(by_work[w])) for w in work]) / work
        smooth = [float(np.median(rate[max(0, i - 1) : i + 2])) for i in range(len(rate))]
        us = np.maximum.accumulate(np.array(smooth) * work)
        out[str(threads)][str(elem)][op_class] = xnn_cost.WorkCurve(work=[float(w) for w in work],
                                                                    us=[round(float(u), 3) for u in us])  # fmt: skip
    for by_elem in out.values():
        for by_class in by_elem.values():
            if f"{xnn_cost.CPU_PREFIX}add" in by_class:
                by_class[xnn_cost.CPU_FALLBACK] = by_class[f"{xnn_cost.CPU_PREFIX}add"]
    return {t: dict(v) for t, v in out.items()}


def _unit_costs(measurements: list[xnn_cost.OpMeasurement], curves: OpCurves) -> UnitCosts:
    """Per (threads, element bytes, class): the median over its unit probes of what each took beyond its class's
    curve, per unit (never below 0)."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for m in measurements:
        curve = curves.get(str(m.threads), {}).get(str(m.elem_bytes), {}).get(m.op_class)
        if curve is not None and m.units > 0:
            groups[(str(m.threads), str(m.elem_bytes), m.op_class)].append((m.us - curve.at(m.work)) / m.units)
    out: UnitCosts = defaultdict(lambda: defaultdict(dict))
    for (threads, elem, op_class), per_unit in sorted(groups.items()):
        out[threads][elem][op_class] = round(max(0.0, float(np.median(per_unit))), 5)
    return {t: dict(v) for t, v in out.items()}


def weight_kib(gemm: xnn_cost.GemmShape, elem_bytes: int) -> float:
    """The KiB of weights a product of one group reads (its taps x input x output channels)."""
    return gemm.taps * gemm.k * gemm.n * elem_bytes / 1024


def streaming(measurements: list[xnn_cost.OpMeasurement]) -> dict[str, xnn_cost.Curve]:
    """Per thread count: what a run spends reading a program's weights of F KiB in all beyond reading them from
    cache, by F, from the weight-streaming probes (chains of one-row products, each layer its own weights, so their
    time is the weights' reading): (the probe's microseconds per KiB of weights at F, less the smallest chain's,
    whose weights stay in cache from one run to the next) x F, made non-decreasing. This EPYC at 1 thread: 0.012
    us per KiB at 2-4 MiB, 0.030 at 24 MiB, 0.039 at 96 MiB (its L3 is 32 MiB)."""
    groups: dict[int, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in measurements:
        if m.footprint_kib > 0 and m.gemm is not None:
            groups[m.threads][m.footprint_kib].append(m.us / weight_kib(m.gemm, m.elem_bytes))
    out = {}
    for threads, by_footprint in sorted(groups.items()):
        footprints = sorted(by_footprint)
        rates = np.array([float(np.median(by_footprint[f])) for f in footprints])
        beyond = np.maximum.accumulate(np.maximum(0.0, rates - rates[0]) * np.array(footprints))
        out[str(threads)] = xnn_cost.Curve(kib=footprints, us=[round(float(u), 3) for u in beyond])
    return out


def refitted(profile: xnn_cost.XnnpackProfile) -> xnn_cost.XnnpackProfile:
    """`profile` with its packing tiles, op curves, per-unit costs and weight streaming fitted again from its own
    op measurements (what a change of these rules needs; the overheads are fitted on the probes' runs, which a
    profile does not keep)."""
    tiles = packing(profile.op_measurements)
    curves, unit_us = op_curves(profile.op_measurements, tiles)
    update = {
        "packing": tiles,
        "op_curves": curves,
        "unit_us": unit_us,
        "streaming": streaming(profile.op_measurements),
    }
    return profile.model_copy(update=update)


def conversion_curves(measurements: list[xnn_cost.Measurement]) -> ConversionCurves:
    """Per (threads, element bytes, class): the measured microseconds by KiB, made non-decreasing (a larger
    conversion never costs less; ETDump reads whole microseconds, so small ones can read 0). The tile probes are
    on no curve: their dims are what the curve's probes are not, a few elements long."""
    groups: dict[tuple[int, int, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in measurements:
        if not m.tile_probe:
            groups[(m.threads, m.elem_bytes, m.kind)][float(np.prod(m.shape)) * m.elem_bytes / 1024].append(m.us)
    out: ConversionCurves = defaultdict(lambda: defaultdict(dict))
    for (threads, elem, kind), by_kib in sorted(groups.items()):
        kib = sorted(by_kib)
        us = np.maximum.accumulate([float(np.median(by_kib[k])) for k in kib])
        out[str(threads)][str(elem)][kind] = xnn_cost.Curve(kib=kib, us=[round(float(u), 3) for u in us])
    return {t: dict(v) for t, v in out.items()}


def transpose_tiles(measurements: list[xnn_cost.Measurement], curves: ConversionCurves) -> Packing:
    """Per thread count and element size: the tiles (along the output's innermost dim, along the input's) under
    which the tile probes' times agree best with the transpose curve read at their tiled KiB
    (`cost_models.xnnpack.tiled_kib`): the least sum of absolute log errors, on a tie the smaller tiles. The
    curve's own probes have every transposed dim 16 or more, so no candidate pads them; a tile probe has one dim
    of 2-12 elements, which the kernel pads to its tile (this EPYC, int8: an NCHW image of 3 channels to NHWC
    read 9 us, one of 16 channels and more bytes 2 us). Read at the fewest threads measured and stated for every
    thread count: the kernel is one per element size."""
    by_elem: dict[int, list[xnn_cost.Measurement]] = defaultdict(list)
    for m in measurements:
        if m.tile_probe and m.kind == "transpose" and m.us >= MIN_FIT_US:
            by_elem[m.elem_bytes].append(m)
    out: Packing = defaultdict(dict)
    for elem, mine in sorted(by_elem.items()):
        fewest = min(m.threads for m in mine)
        curve = curves.get(str(fewest), {}).get(str(elem), {}).get("transpose")
        if curve is None:
            continue
        alone = [m for m in mine if m.threads == fewest]
        best = min(itertools.product(CANDIDATE_TILES, CANDIDATE_TILES),
                   key=lambda tiles: (_tile_error(alone, curve, tiles), tiles))  # fmt: skip
        for threads in sorted({m.threads for m in measurements}):
            out[str(threads)][str(elem)] = best
    return dict(out)


def _tile_error(measurements: list[xnn_cost.Measurement], curve: xnn_cost.Curve, tiles: tuple[int, int]) -> float:
    """The sum of the absolute log errors of `curve` read at each measured transpose's KiB tiled by `tiles`."""
    predicted = [curve.at(xnn_cost.tiled_kib(m.shape, m.elem_bytes, m.perm, tiles)) for m in measurements]
    return round(float(np.abs(np.log(np.maximum(predicted, 1e-3) / [m.us for m in measurements])).sum()), 9)
