"""`layout-solver device-kit read DIR`: a kit's results (from `run.sh` on the device) as a stock / solver table
with paired ratios and the outputs' agreement, and the probes' dispatches as a profile in `calibrate vulkan`'s
format."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from layout_solver.compare.outputs import max_abs_diff
from layout_solver.targets.vulkan.device_kit.manifest import Kit
from layout_solver.targets.vulkan.measure import paired_ratio

# ExecuTorch's ScalarType codes (runtime/core/portable_type/scalar_type.h) of the dtypes a program's outputs take.
SCALAR_TYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
                7: np.float64, 11: np.bool_}  # fmt: skip
SLOWER = 1.03  # the issue's bound on a GPU: a paired ratio above it is a slower program
DEFAULT_PREDICTION = "mobile-gpu"  # the default objective's own prediction is read with this profile
# Each program is also profiled (run.sh: results/programs/NAME.etdp), so the report sets three readings of a
# change side by side: the profile's prediction, the device's own query-pool times of the two programs' dispatches,
# and the paired wall time. On an H200 the last two agreed (wall time = 112 us + 1.23 x the dispatch sum over 54
# programs; a program's change in dispatch time within 20% of its wall-time change on most models) while the
# probes' profile predicted 2-3x the change: the probes price an op in a chain of its own kind above what the same
# op costs among a real program's. `wall_scale` states that relation (Theil-Sen slope of wall time on dispatch
# sum, robust to a few odd programs); fewer programs than this, or a slope outside WALL_SCALE_RANGE, state none.
MIN_WALL_SCALE_PROGRAMS = 8
WALL_SCALE_RANGE = (0.05, 5.0)


@dataclass
class Row:
    """One model under one solver objective, against stock."""

    model: str
    objective: str
    same_program: bool
    transitions: tuple[int, int]
    stock_ms: float | None = None
    solver_ms: float | None = None
    paired: list[float] = field(default_factory=list)  # one per timing process
    predicted_us: float | None = None
    # stock's and the solver's programs' query-pool dispatch times summed, where run.sh profiled them
    dispatch_us: tuple[float | None, float | None] = (None, None)
    outputs_equal: bool | None = None  # the solver's outputs bit-identical to stock's
    max_diff_vs_stock: float | None = None
    max_diff_vs_eager: tuple[float | None, float | None] = (None, None)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """The paired ratio: the median over the timing processes."""
        return statistics.median(self.paired) if self.paired else None

    @property
    def measured_us(self) -> float | None:
        """The measured change in microseconds: (ratio - 1) x stock's time."""
        return (self.ratio - 1.0) * self.stock_ms * 1000.0 if self.ratio and self.stock_ms else None

    @property
    def device_us(self) -> float | None:
        """The change in the programs' summed query-pool dispatch times: solver minus stock."""
        stock, solver = self.dispatch_us
        return solver - stock if stock is not None and solver is not None else None


def load_outputs(results: Path, program: str) -> list[np.ndarray] | str:
    """A program's outputs as the runner wrote them, or its error."""
    meta_file = results / "outputs" / f"{program}.outputs.json"
    if not meta_file.is_file():
        return "no outputs (the run did not reach it)"
    meta = json.loads(meta_file.read_text())
    if "error" in meta:
        return meta["error"]
    arrays = []
    for k, out in enumerate(meta["outputs"]):
        raw = (results / "outputs" / f"{program}.out{k}.bin").read_bytes()
        arrays.append(np.frombuffer(raw, dtype=SCALAR_TYPES[out["dtype"]]).reshape(out["sizes"]))
    return arrays


def _times(results: Path, key: str, passes: int) -> list[dict]:
    found = []
    for p in range(1, passes + 1):
        path = results / "times" / f"{key}.{p}.json"
        if path.is_file():
            found.append(json.loads(path.read_text()))
    return found


def program_dispatches(kit_dir: Path, kit: Kit) -> dict[str, list]:
    """Each program's dispatches (runtime.Dispatch, each the median over the probe rounds) where run.sh profiled
    it (results/programs/NAME.etdp), read once for the table, the wall-time relation and the profile."""
    from layout_solver.targets.vulkan.runtime import Dispatch, _dispatches

    dumps = sorted((kit_dir / "results" / "programs").glob("*.etdp"))
    found = {dump.stem: [Dispatch(*d) for d in _dispatches(dump.read_bytes(), kit.probe_rounds)] for dump in dumps}
    return {program: dispatches for program, dispatches in found.items() if dispatches}


def as_run(kit_dir: Path, kit: Kit) -> Kit:
    """The manifest with the warm-up, rounds and passes the run used (results/settings.sh, which run.sh copies
    from the kit's settings.sh: a quicker run may have edited it)."""
    used = kit_dir / "results" / "settings.sh"
    if not used.is_file():
        return kit
    values = dict(line.split("=", 1) for line in used.read_text().split() if "=" in line)
    names = {"WARMUP": "warmup", "ROUNDS": "rounds", "PASSES": "passes", "PROBE_WARMUP": "probe_warmup",
             "PROBE_ROUNDS": "probe_rounds"}  # fmt: skip
    return kit.model_copy(update={field: int(values[key]) for key, field in names.items() if key in values})


def rows(kit_dir: Path, kit: Kit, dispatched: dict[str, list]) -> list[Row]:
    """Every (model, objective) of the kit with what the device measured (`dispatched`: `program_dispatches`)."""
    results = kit_dir / "results"

    def dispatch_sum(program: str) -> float | None:
        return sum(d.us for d in dispatched[program]) if program in dispatched else None

    found = []
    for model in kit.models:
        if model.error:
            found.append(Row(model.name, "-", False, (0, 0), error=f"not lowered: {model.error}"))
            continue
        stock = model.sides["stock"]
        expected = [np.load(kit_dir / e) for e in model.expected]
        stock_out = load_outputs(results, stock.program)
        timings = _times(results, model.key, kit.passes)
        stock_runs = [t.get(stock.program, {}).get("ms") or [] for t in timings]
        for objective in kit.objectives:
            side = model.sides[objective]
            row = Row(model.name, objective, side.sha256 == stock.sha256, (stock.transitions, side.transitions))
            # The default objective's prediction: by the kit's own device profile where it has one, else mobile-gpu's.
            label = objective if objective != "default" else next(iter(kit.profile_files), DEFAULT_PREDICTION)
            if label in stock.modelled_us_by_profile and label in side.modelled_us_by_profile:
                row.predicted_us = side.modelled_us_by_profile[label] - stock.modelled_us_by_profile[label]
            row.dispatch_us = (dispatch_sum(stock.program), dispatch_sum(side.program))
            solver_out = load_outputs(results, side.program)
            if isinstance(stock_out, str) or isinstance(solver_out, str):
                row.error = stock_out if isinstance(stock_out, str) else solver_out
            else:
                row.max_diff_vs_stock = max_abs_diff(stock_out, solver_out)
                row.outputs_equal = len(stock_out) == len(solver_out) and all(
                    a.tobytes() == b.tobytes() for a, b in zip(stock_out, solver_out)
                )
                row.max_diff_vs_eager = (max_abs_diff(stock_out, expected), max_abs_diff(solver_out, expected))
            solver_runs = [t.get(side.program, {}).get("ms") or [] for t in timings]
            row.paired = [r for s, o in zip(stock_runs, solver_runs) if (r := paired_ratio(s, o)) is not None]
            if any(stock_runs):
                row.stock_ms = statistics.median(x for r in stock_runs for x in r)
            if any(solver_runs):
                row.solver_ms = statistics.median(x for r in solver_runs for x in r)
            if not row.paired and row.error is None:
                row.error = "; ".join(str(t.get(side.program, t.get("crash", "not timed"))) for t in timings)[:200]
            found.append(row)
    return found


def summary(found: list[Row], objectives: list[str]) -> list[str]:
    """Per objective: programs changed, slower ones, the geometric mean where stock inserts transitions, and the
    prediction's error on the median model whose program changed."""
    lines = []
    for objective in objectives:
        mine = [r for r in found if r.objective == objective and r.ratio is not None]
        changed = [r for r in mine if not r.same_program]
        slower = [f"{r.model} {r.ratio:.3f}" for r in changed if r.ratio > SLOWER]
        with_transitions = [r.ratio for r in mine if r.transitions[0] > 0]
        errors = [
            abs(r.predicted_us - r.measured_us) / abs(r.measured_us)
            for r in changed
            if r.predicted_us is not None and r.measured_us and objective != "default"
        ]
        gm = statistics.geometric_mean(with_transitions) if with_transitions else None
        if not mine:
            lines.append(f"- {objective}: nothing timed")
            continue
        line = (
            f"- {objective}: {len(changed)} of {len(mine)} programs differ from stock; slower than {SLOWER}: "
            f"{', '.join(slower) or 'none'}"
        )
        if gm is not None:
            line += f"; geomean over the {len(with_transitions)} models where stock inserts transitions {gm:.3f}"
        if errors:
            line += f"; prediction error on the median changed model {statistics.median(errors):.0%}"
        lines.append(line)
    return lines


def table(found: list[Row]) -> list[str]:
    """The Markdown table, one row per (model, objective)."""

    def num(x, fmt):
        return format(x, fmt) if x is not None else "-"

    lines = [
        (
            "| model | objective | program | transitions stock / solver | stock ms | solver ms | paired ratio "
            "(per process) | predicted us | device us | measured us | outputs vs stock | max diff vs eager stock / solver |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        if r.objective == "-":
            lines.append(f"| {r.model} | - | {r.error} |  |  |  |  |  |  |  |  |  |")
            continue
        outputs = "identical" if r.outputs_equal else (num(r.max_diff_vs_stock, ".2e") if r.error is None else r.error)
        per = " ".join(f"{p:.3f}" for p in r.paired)
        lines.append(
            f"| {r.model} | {r.objective} | {'same as stock' if r.same_program else 'differs'} | "
            f"{r.transitions[0]} / {r.transitions[1]} | {num(r.stock_ms, '.3f')} | {num(r.solver_ms, '.3f')} | "
            f"{num(r.ratio, '.3f')} ({per}) | {num(r.predicted_us, '.1f')} | {num(r.device_us, '.1f')} | "
            f"{num(r.measured_us, '.1f')} | "
            f"{outputs} | {num(r.max_diff_vs_eager[0], '.1e')} / {num(r.max_diff_vs_eager[1], '.1e')} |"
        )
    return lines


def measured_profile(kit_dir: Path, kit: Kit, command: str, programs: list[list] = ()):
    """The probes' dispatches fitted into a profile (None if the kit had no probes or none ran), with the samples
    the `programs`' dispatches give: ops of the probed classes and clones as they ran among a real program's
    dispatches, which the probes' chains of one op overprice (see the comment on MIN_WALL_SCALE_PROGRAMS)."""
    from layout_solver.targets.vulkan.calibrate import fitted_profile
    from layout_solver.targets.vulkan.probing import Probe, _read, read_program
    from layout_solver.targets.vulkan.runtime import Dispatch, _dispatches

    if not kit.probes:
        return None
    folder = kit_dir / "results" / "etdump"
    probe_programs = sorted({p.program for p in kit.probes})
    profiled, failed = {}, {}
    for program in probe_programs:
        dump = folder / f"{program}.etdp"
        if dump.is_file():
            profiled[program] = [Dispatch(*d) for d in _dispatches(dump.read_bytes(), kit.probe_rounds)]
        else:
            error = folder / f"{program}.error"
            failed[program] = error.read_text().strip() if error.is_file() else "not run"
    if not profiled:
        return None
    probes = [Probe(p.kind, p.key, tuple(p.shape), p.program) for p in kit.probes]
    points = _read(probes, [profiled])
    in_context = 0
    for dispatches in programs:
        for key, point in read_program(dispatches):
            points.setdefault(key, []).append(point)
            in_context += 1
    device = (kit_dir / "results" / "device.txt").read_text().strip()
    lowered = len(probe_programs)
    fitted = fitted_profile(points, device, command, lowered, lowered + len(kit.probes_skipped), failed)
    if not in_context:
        return fitted
    said = f"{in_context} samples from the kit's own programs' dispatches fitted with the probes'"
    return fitted.model_copy(update={"notes": [*fitted.notes, said]})


@dataclass(frozen=True)
class WallScale:
    """Wall time per microsecond of query-pool time, fitted over `programs` programs: wall = intercept_us +
    slope x dispatch sum."""

    slope: float
    intercept_us: float
    programs: int

    def said(self) -> str:
        """The relation as the report states it."""
        return (
            f"wall time = {self.intercept_us:.1f} us + {self.slope:.3f} x the query-pool dispatch sum, Theil-Sen over "
            f"{self.programs} programs of the kit"
        )


def wall_scale(found: list[Row]) -> WallScale | None:
    """How the programs' wall time relates to their query-pool dispatch times, fitted over every program the run
    both timed (its median wall time) and profiled (its dispatches summed): each model's stock program once, each
    solver side's; None with fewer than MIN_WALL_SCALE_PROGRAMS or a slope outside WALL_SCALE_RANGE."""
    from scipy.stats import theilslopes

    points = {}  # (model, side) -> (dispatch sum, wall us)
    for r in found:
        for side, ms, summed in (("stock", r.stock_ms, r.dispatch_us[0]), (r.objective, r.solver_ms, r.dispatch_us[1])):
            if ms is not None and summed is not None:
                points[(r.model, side)] = (summed, 1000.0 * ms)
    if len(points) < MIN_WALL_SCALE_PROGRAMS:
        return None
    sums, walls = zip(*points.values())
    slope, intercept, _, _ = theilslopes(walls, sums)
    if not WALL_SCALE_RANGE[0] <= slope <= WALL_SCALE_RANGE[1]:
        return None
    return WallScale(round(float(slope), 4), round(float(intercept), 1), len(points))


def unpack(kit_dir: Path, archive: list[Path]) -> None:
    """The results `run.sh ARCHIVE` packed (one file, or its parts in order) unpacked into the kit, replacing any
    results there."""
    import io
    import shutil
    import tarfile

    data = b"".join(Path(part).read_bytes() for part in archive)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        if not names or any(n != "results" and not n.startswith("results/") for n in names):
            raise ValueError(f"{archive[0]} does not hold a kit's results/ folder")
        shutil.rmtree(kit_dir / "results", ignore_errors=True)
        tar.extractall(kit_dir, filter="data")


def parts(kit_dir: Path) -> list[Path]:
    """The kit's parts: the folder itself if it is one, else its part-N folders in order."""
    if (kit_dir / "kit.json").is_file():
        return [kit_dir]
    found = sorted(kit_dir.glob("part-*/kit.json"), key=lambda f: int(f.parent.name.split("-")[1]))
    if not found:
        raise ValueError(f"{kit_dir} is not a device kit (no kit.json, no part-N/kit.json)")
    return [f.parent for f in found]


def read(
    kit_dir: str | Path, command: str = "", archive: list[Path] | None = None, with_programs: bool = False
) -> tuple[str, Path | None]:
    """The report (Markdown) of a kit's results, every part that has results, written to results/report.md of the
    kit (or of its first part), and the measured profile's path (results/profile.json of the part with the
    probes), if the kit had probes. `archive`: the results `run.sh` packed (or their parts) to unpack into the
    kit first (a kit of one part, or one part's folder). `with_programs`: the profile takes the samples of the
    programs every part with results profiled too (on the H200 it halved the prediction error, 61% against 122%,
    but its choices gained less: geomean 0.945 against 0.928, benchmarks/results/vulkan_gpu.md)."""
    kit_dir = Path(kit_dir)
    folders = parts(kit_dir)
    if archive:
        if len(folders) > 1:
            raise ValueError(f"{kit_dir} has {len(folders)} parts: unpack an archive into its part's folder")
        unpack(folders[0], archive)
    ran = [f for f in folders if (f / "results" / "device.txt").is_file()]
    if not ran:
        raise ValueError(f"{kit_dir} has no results: run `bash PART/run.sh` on the device first")
    kits = {f: as_run(f, Kit.model_validate_json((f / "kit.json").read_text())) for f in folders}
    devices = sorted({(f / "results" / "device.txt").read_text().strip() for f in ran})
    device = " / ".join(devices)
    dispatched = {f: program_dispatches(f, kits[f]) for f in ran}
    found = [row for f in ran for row in rows(f, kits[f], dispatched[f])]
    first = kits[ran[0]]
    profile, profile_path = None, None
    scale = wall_scale(found)
    in_programs = [d for f in ran for d in dispatched[f].values()] if with_programs else []
    for f in ran:
        if kits[f].probes:
            profile = measured_profile(f, kits[f], command, in_programs)
            if profile is not None:
                profile_path = f / "results" / "profile.json"
                profile_path.write_text(profile.model_dump_json(indent=1) + "\n")
    missing = [f.name for f in folders if f not in ran]
    lines = [
        f"# Vulkan on {device}: stock against the solver",
        "",
        (
            f"Kit built {first.built} (executorch {first.executorch}; `{first.command}`); each model's programs timed "
            f"in {first.passes} processes of {first.rounds} interleaved rounds after {first.warmup} warm-up runs. "
            "Paired ratio: median over the rounds of solver / stock within a process, then the median over the "
            "processes. Predicted: the objective's profile (for the default: the kit's device profile, else "
            f"{DEFAULT_PREDICTION}), solver minus stock; device: solver minus stock in the programs' query-pool "
            "dispatch times summed (where run.sh profiled them); measured: (ratio - 1) x stock's time."
        ),
        *([f"Parts without results (not run yet): {', '.join(missing)}."] if missing else []),
        "",
        *summary(found, first.objectives),
        "",
        *table(found),
    ]
    if profile is not None:
        modes = sum(len(t) for t in profile.op_modes.values())
        probed = next(k for k in kits.values() if k.probes)
        said = (
            f"Profile measured by the probes: {modes} op modes, {len(profile.transitions)} transitions "
            f"({len(probed.probes)} probes; {len(probed.probes_skipped)} left out at build) -> {profile_path}"
        )
        lines += ["", said]
    if scale is not None:
        lines += ["", f"Wall time against the device's query pool: {scale.said()}."]
    text = "\n".join(lines) + "\n"
    (ran[0] / "results" / "report.md").write_text(text)
    return text, profile_path
