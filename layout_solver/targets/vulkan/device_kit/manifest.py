"""What a device kit holds (`kit.json`), written by `build` and read back by `read`: validated both ways, since
a kit travels to another machine and comes back with results beside it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KIT_VERSION = 1
PLAN = "programs.tsv"  # one program per line: name, .pte, method, inputs (what vk_runner reads)
PROBE_PLAN = "probes.tsv"
PAIRS = "pairs.tsv"  # one model per line: the model's key, then the programs timed together


class Strict(BaseModel):
    """Unknown fields are errors and records do not change once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Side(Strict):
    """One lowering of a model: stock's, or the solver's under one objective ("default" or a profile)."""

    program: str  # the plan's name for it: "<model key>~<side>"
    pte: str  # path in the kit (programs are stored once per distinct bytes)
    sha256: str
    transitions: int
    modelled_us_by_profile: dict[str, float]  # the lowering priced by each profile it was priced with
    pass_seconds: float


class ModelEntry(Strict):
    """A model of the kit: its inputs, eager outputs and every side."""

    name: str  # as the zoo names it ("convnext_stack", "outside:deit")
    key: str  # file-safe
    inputs: list[str]
    expected: list[str]  # eager outputs (.npy), for the outputs' distance from eager
    sides: dict[str, Side]  # "stock", "default", a profile label
    error: str | None = None  # a model that did not lower: why


class ProbeEntry(Strict):
    """One calibration measurement: the probe program whose dispatches give it (as `calibrate` reads them)."""

    kind: str
    key: str
    shape: list[int]
    program: str


class Kit(Strict):
    """kit.json."""

    version: int = KIT_VERSION
    built: str  # UTC time
    command: str
    executorch: str
    objectives: list[str]  # the solver sides: "default" and profile labels (or profile files' stems)
    profile_files: dict[str, str] = Field(default_factory=dict)  # label -> file name in the kit (a device profile)
    warmup: int
    rounds: int
    passes: int  # timing processes per model: a ratio read in one process is checked by the others
    probe_warmup: int
    probe_rounds: int
    models: list[ModelEntry]
    probes: list[ProbeEntry] = Field(default_factory=list)
    probes_skipped: list[str] = Field(default_factory=list)  # probe programs left out (size cap, refused pins)
    part: int = 1  # a kit too large for one device call comes in parts, each a whole kit of some models
    parts: int = 1
