"""What a target is, and the registry every target is looked up in.

A target (`Target`) knows its name, its family, the options its comparison takes, how to compare stock
against the solver on a module, how to calibrate its costs on the present device (where it has any), what the zoo's ratio compares (`headline`) and within what tolerance, and
what decides its results beyond the model (`cache_inputs`). Each built-in target lives in a module of its own
in this package and is registered in `layout_solver.targets` (its `__init__`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from layout_solver.core.solve import DEFAULT_TIME_LIMIT

# The command-line flag each comparison option comes from, for errors said in the user's words.
FLAGS = {"input_order": "--input-order", "execute": "--execute", "runtime": "--vulkan-runtime",
         "cost_profile": "--cost-profile", "src": "--src", "dst": "--dst", "threads": "--threads",
         "verify": "--verify", "rounds": "--rounds"}  # fmt: skip


class Plot(NamedTuple):
    """A chart the zoo report draws for a target from its rows: stock's `stock_key` against the solver's
    `solver_key` per model ("bars"), or the change of the total against the change of the transposes
    ("totals_vs_transposes": the Vela cycle columns)."""

    filename: str
    title: str = ""
    ylabel: str = ""
    stock_key: str = ""
    solver_key: str = ""
    kind: str = "bars"


@dataclass(frozen=True)
class Target:
    """A target: its name, family ("ethos-u", "vulkan"), a description, and the options its comparison (and
    its cost query) takes."""

    name: str
    family: ClassVar[str] = ""
    # The backend whose code lowers for this target (a key of provenance.BACKEND_CODE): its results' cache keys
    # digest the project's source less the other backends' code.
    backend: ClassVar[str | None] = None
    options: ClassVar[frozenset[str]] = frozenset()  # compare/zoo options this target accepts
    query_options: ClassVar[frozenset[str]] = frozenset()  # `cost` query fields of this target alone
    family_name: ClassVar[str] = ""  # the family in words ("Ethos-U")
    # What the zoo's solver-to-stock ratio compares (the first measure both sides have), and the relative
    # change within which the two are "unchanged".
    headline: ClassVar[tuple[str, ...]] = ()
    headline_name: ClassVar[str] = ""
    tolerance: ClassVar[float] = 0.001
    row_fields: ClassVar[tuple[str, ...]] = ()  # each side's measures the zoo's results.csv keeps
    example: ClassVar[str] = ""  # how a user names a target of this family, for error messages
    times_programs: ClassVar[bool] = False  # every comparison times both programs on this machine's CPU
    plot_marker: ClassVar[str] = "o"  # its points on the zoo report's solve-time plot
    # How long one comparison takes against other targets' (Ethos-U: Vela and the reference model on both
    # sides): the zoo starts the longest jobs first, so the last job to finish is a short one.
    job_weight: ClassVar[float] = 1.0

    @property
    def description(self) -> str:
        """What the target is, in words."""
        return self.name

    def check_options(self, options: dict, accepted: frozenset[str] | None = None) -> None:
        """Raise ValueError naming any option (set to something but its default) this target does not take
        (of `accepted`, default its comparison options), and the targets that take it."""
        stray = stray_options(options, self.options if accepted is None else accepted)
        if stray:
            raise ValueError(stray_options_message(stray))

    def take_options(self, given: dict) -> dict:
        """The options of `given` this target takes (those set), checked as the target checks them."""
        return self.checked_options({k: v for k, v in given.items() if k in self.options and v not in (None, False)})

    def checked_options(self, options: dict) -> dict:
        """`options`, checked up front (before any lowering); ValueError says what is wrong."""
        return options

    def failed(self, comparison, options: dict) -> bool:
        """Whether the solver side of `comparison` failed where stock's did not (the CLI's exit status)."""
        return comparison.side("solver").failed

    def cache_inputs(self) -> dict:
        """What, beyond the model, options and the project's source, decides this target's results (the zoo's
        cache key): files the user may change between runs."""
        return {}

    # ---- how the zoo report reads this target's results (`layout_solver.zoo.report`) ----

    def verdict_before_price(self, result: dict, stock: dict, solver: dict, equivalent) -> str | None:
        """The verdict of a pair that its price does not decide ("program failed to run", "not equivalent",
        "not checked"), else None. Here: the check on the reference executor the comparison recorded
        (`stock_reference` / `solver_reference`, and `equivalent`, or `equivalent` given for one method's pair)."""
        solver_ran = not str(result.get("solver_reference", "")).startswith("error")
        if not solver_ran and result.get("stock_reference") == "ok":
            return "program failed to run"
        same = result.get("equivalent") if equivalent is None else equivalent
        if same is None and "equivalent" in result:
            same = result.get("equivalent_on_example_inputs")
            if same is None:  # neither pair could be compared (both refused, or neither ran)
                return "not checked"
        return "not equivalent" if same is False else None

    def report_fields(self, result: dict) -> dict:
        """Columns of results.csv beyond `row_fields`, read off one model's `result`."""
        return {}

    def report_section(self, rows: list[dict]) -> list[str]:
        """This target's detail table in report.md (markdown lines) from its `rows`: here, stock / solver per
        `row_fields` column."""
        lines = [f"## {self.description}: {self.name}", "",
                 "| model | status | " + " | ".join(f"{f} stock / solver" for f in self.row_fields)
                 + " | ratio | equivalent |",
                 "|" + "---|" * (len(self.row_fields) + 4)]  # fmt: skip
        for r in rows:
            cells = [f"{r[f'stock_{f}']} / {r[f'solver_{f}']}" for f in self.row_fields]
            lines.append(
                f"| {r['model']} | {r['status']} | " + " | ".join(cells) + f" | {r['ratio']} | {r['equivalent']} |"
            )
        return [*lines, ""]

    def report_notes(self, rows: list[dict]) -> list[str]:
        """Lines the report's summary adds for this target (e.g. what its timings stray by), after its table."""
        return []

    def plots(self) -> tuple[Plot, ...]:
        """The charts of this target's rows the report draws, beside every target's ratio plot."""
        return ()

    def price_transpose(self, query) -> dict:
        """One transpose or layout change priced by this target's cost model (a cost_models.query.TransposeQuery;
        the answer JSON-ready, as `layout-solver cost transpose` and the service's /v1/cost/transpose give it).
        ValueError says what the query lacks for this target."""
        raise ValueError(f"{self.name}: no cost query")

    calibration_help: ClassVar[str] = ""  # `layout-solver calibrate NAME`'s help; "" where nothing is measured

    def add_calibration_arguments(self, parser) -> None:
        """The flags of `layout-solver calibrate NAME` (an argparse parser): at least --out."""

    def calibration_settings(self, args) -> dict:
        """The keyword arguments of `calibrate` from the parsed flags (the CLI adds `command` and `log`)."""
        return {}

    def calibrate(self, out, **settings) -> str:
        """Measure the present device's costs for this target and write them to `out`; returns a one-line
        summary. ValueError says what is wrong with the settings. Targets priced by their own compiler for
        the lowering's compile spec (Ethos-U: Vela probes) have nothing to calibrate."""
        raise ValueError(f"{self.name}: nothing to calibrate (priced by its compiler for each compile spec)")

    def compare(self, module, inputs, name=None, time_limit: float = DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver for one module (layout_solver.compare.result.Comparison)."""
        raise NotImplementedError

    # `explain`: the unit a side's graphs are priced in, and the comparison's figure their prices add up to.
    explain_unit: ClassVar[str] = ""
    explain_total: ClassVar[str] = "modelled_us"

    def explained_graphs(self, kept) -> list:
        """One side's program as `graph_io.layout_graph.LayoutGraph`s from what its comparison kept
        (`layout_solver.compare.artifacts`): here, each pass report's graph snapshot, one graph per delegate."""
        from graph_io.layout_graph import LayoutGraph

        return [
            LayoutGraph.from_snapshot(
                f"delegate {i}" + (f" ({r.partition})" if r.partition else ""), self.explain_unit, r.graph
            )
            for i, r in enumerate(kept)
            if r.graph is not None
        ]

    def compare_methods(self, built, name=None, time_limit: float = DEFAULT_TIME_LIMIT, **options):
        """Stock versus per-method versus joint for a multi-method model (MethodsComparison)."""
        raise NotImplementedError


TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add `target` to the registry (a name may be registered once)."""
    if target.name in TARGETS:
        raise ValueError(f"target {target.name!r} is registered twice")
    TARGETS[target.name] = target
    return target


def get_target(name: str) -> Target:
    """The registered target `name`; ValueError names the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None


def stray_options(options: dict, accepted) -> list[str]:
    """The options set (to anything but None or False) that are not in `accepted`, sorted."""
    return sorted(k for k, v in options.items() if v not in (None, False) and k not in accepted)


def stray_options_message(stray: list[str]) -> str:
    """'--execute, --cost-profile: Vulkan options (--target vulkan)': the options no target asked for takes,
    by the flags they come from, and the targets that take them."""
    takers = {t.family: t for t in TARGETS.values() if set(stray) & (t.options | t.query_options)}
    where = "; ".join(f"{t.family_name} options ({t.example})" for t in takers.values())
    return f"{', '.join(FLAGS.get(k, k) for k in stray)}: {where or 'not an option of any target'}"


def target_names(family: str | None = None) -> list[str]:
    """Registered target names (of one family, if given)."""
    return [n for n, t in TARGETS.items() if family is None or t.family == family]


def int_list(text: str) -> tuple[int, ...]:
    """`1,2` -> (1, 2): a command-line flag's comma-separated integers."""
    import argparse

    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def shape_list(text: str) -> list[tuple[int, ...]]:
    """`1x1x128,4x1x64` -> [(1, 1, 128), (4, 1, 64)]; every dim a positive integer."""
    import argparse

    try:
        shapes = [tuple(int(d) for d in item.split("x")) for item in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected shapes like 1x1x128,4x1x64, got {text!r}") from exc
    if any(not s or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(f"every dimension must be a positive integer: {text!r}")
    return shapes
