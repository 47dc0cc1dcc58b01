"""ExecuTorch's multi-method hook, driven by one joint solve (both backends).

`to_edge_transform_and_lower({"prefill": ep1, "decode": ep2}, ...)` hands a
backend every partition of every method at once through
`BackendDetails.preprocess_multimethod`. Inside `joint_preprocess(...)` that
hook runs in two phases:

1. *collect*: each partition is preprocessed on a copy until the solver pass
   has built its problem; the pass hands the problem here and stops the copy.
2. one `multimethod.solve_jointly` over all of them (methods weighted, shared
   constants linked, identical groups served from the cache);
3. *apply*: each partition is preprocessed for real; the solver pass finds its
   answer here instead of solving (after checking it built the same problem).

Single-method programs take the stock path unchanged, and so does any
partition whose pass never reached the solver (it is solved on its own).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from layout_solver.core.multimethod import JointResult, PartitionProblem, SubproblemCache, solve_jointly
from layout_solver.core.problem import Problem, Solution, problem_digest
from layout_solver.lowering.pass_report import PARTITION, current_partition
from layout_solver.lowering.provenance import tensor_bytes

log = logging.getLogger(__name__)


class _Collected(Exception):
    """Raised by the solver pass in the collect phase to stop the throw-away copy's pipeline."""


class JointReports(list):
    """The passes' per-partition reports (list items) plus `joint`: one JointResult per multi-method lowering."""

    def __init__(self):
        super().__init__()
        self.joint: list[JointResult] = []


@dataclass
class _Session:
    weights: dict[str, float]
    solve_fn: Callable[[Problem], Solution]
    constant_byte_cost: float
    cache: SubproblemCache
    phase: str = "idle"  # "collect" | "apply" | "idle"
    collected: dict[str, PartitionProblem] = field(default_factory=dict)
    solutions: dict[str, Solution] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)


_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("layout_solver_joint", default=None)


def _each_partition(cls, edge_programs, compile_specs, preprocess=None) -> dict:
    """The default multi-method loop, with each partition's name set while it is preprocessed."""
    out = {}
    for method, programs in edge_programs.items():
        out[method] = []
        for index, (program, spec) in enumerate(zip(programs, compile_specs[method], strict=True)):
            token = PARTITION.set(f"{method}#{index}")
            try:
                out[method].append((preprocess or cls.preprocess)(program, spec))
            finally:
                PARTITION.reset(token)
    return out


def program_links(program, names: set[str]) -> dict[str, str]:
    """Link keys of the placeholders in `names`: buffers by fully qualified name, parameters and lifted
    constants by the SHA-256 of their bytes (equal bytes are one object wherever they appear)."""

    if program is None:
        return {}
    sig = program.graph_signature
    links = {name: f"buffer:{fqn}" for name, fqn in sig.inputs_to_buffers.items() if name in names}
    tensors = {**program.state_dict, **program.constants}
    for name, fqn in {**sig.inputs_to_parameters, **sig.inputs_to_lifted_tensor_constants}.items():
        tensor = tensors.get(fqn)
        if name not in names or tensor is None:
            continue
        try:
            raw = tensor_bytes(tensor)
        except (RuntimeError, TypeError):  # a dtype with no byte view (quantized, say): left unlinked
            continue
        digest = hashlib.sha256(str((tensor.dtype, tuple(tensor.shape))).encode())
        digest.update(raw)
        links[name] = f"const:{digest.hexdigest()[:32]}"
    return links


def in_joint_lowering() -> bool:
    """Whether a joint multi-method lowering is collecting or applying partition problems right now."""
    session = _session.get()
    return session is not None and session.phase in ("collect", "apply") and bool(current_partition())


def solve_partition(
    problem: Problem, solve_fn: Callable[[Problem], Solution], links: Callable[[], dict[str, str]]
) -> Solution:
    """What the backends' solver passes call instead of solving directly.

    `links()` gives the partition's linked values; it hashes every constant, so it
    is called only when collecting for a joint solve, never on the ordinary path.
    Outside a joint lowering: `solve_fn(problem)`. Collect phase: record the
    problem and stop this copy's pipeline. Apply phase: the joint answer for
    this partition, or `solve_fn(problem)` (with a note) if the pass built a
    different problem than it did when collecting.
    """
    session, key = _session.get(), current_partition()
    if session is None or session.phase not in ("collect", "apply") or not key:
        return solve_fn(problem)
    if session.phase == "collect":
        method, index = key.rsplit("#", 1)
        session.collected[key] = PartitionProblem(method, int(index), problem, links())
        session.digests[key] = problem_digest(problem)
        raise _Collected(key)
    solution = session.solutions.get(key)
    if solution is None or session.digests.get(key) != problem_digest(problem):
        solution = solve_fn(problem)
        solution.notes.append(
            f"{key}: not part of the joint solve (its problem changed between the phases); solved on its own"
        )
    return solution


def _collected_signal(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, _Collected):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _joint_multimethod(original, session: _Session, reports: JointReports):
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        if len(edge_programs) < 2:
            return original.__func__(cls, edge_programs, compile_specs)  # one method: exactly as today
        missing = sorted(set(edge_programs) - set(session.weights))
        if missing:
            raise ValueError(
                f"method_weights has no weight for method(s) {missing}; the program has {sorted(edge_programs)}"
            )
        session.collected.clear()
        session.solutions.clear()
        session.digests.clear()
        token = _session.set(session)

        def collect(program, spec):
            try:
                cls.preprocess(copy.deepcopy(program), spec)
            except Exception as exc:
                if not _collected_signal(exc):
                    raise

        try:
            session.phase = "collect"
            _each_partition(cls, edge_programs, compile_specs, collect)
            parts = list(session.collected.values())
            result = solve_jointly(parts, session.weights, session.solve_fn, session.constant_byte_cost, session.cache)
            session.solutions.update(result.solutions)
            reports.joint.append(result)
            log.info(
                "joint solve: %d partitions in %d groups, %d cache hits, %d linked values, objective %.1f",
                len(parts),
                result.groups,
                result.cache_hits,
                result.linked_values,
                result.objective,
            )
            session.phase = "apply"
            return _each_partition(cls, edge_programs, compile_specs)
        finally:
            session.phase = "idle"
            _session.reset(token)

    preprocess_multimethod.joint = True
    return classmethod(preprocess_multimethod)


@contextlib.contextmanager
def naming_partitions(backend_cls) -> Iterator[None]:
    """Scoped: `backend_cls` preprocesses partitions exactly as by default, and `current_partition()` names
    each one (reports can then be told apart per method). Inside `joint_preprocess` it changes nothing."""
    current = backend_cls.__dict__.get("preprocess_multimethod")
    if current is not None and getattr(current.__func__, "joint", False):
        yield
        return
    backend_cls.preprocess_multimethod = classmethod(_each_partition)
    try:
        yield
    finally:
        if current is None:
            del backend_cls.preprocess_multimethod
        else:
            backend_cls.preprocess_multimethod = current


@contextlib.contextmanager
def joint_preprocess(
    backend_cls,
    weights: dict[str, float],
    solve_fn: Callable[[Problem], Solution],
    reports: JointReports,
    constant_byte_cost: float = 0.0,
    cache: SubproblemCache | None = None,
) -> Iterator[None]:
    """Scoped replacement of `backend_cls.preprocess_multimethod` by the joint version; restored on exit."""
    bad = {m: w for m, w in weights.items() if not (isinstance(w, (int, float)) and w > 0)}
    if bad:
        raise ValueError(f"method weights must be positive numbers, got {bad}")
    session = _Session(dict(weights), solve_fn, constant_byte_cost, cache or SubproblemCache())
    original = backend_cls.__dict__.get("preprocess_multimethod", None)
    backend_cls.preprocess_multimethod = _joint_multimethod(
        original or classmethod(lambda cls, p, s: super(backend_cls, cls).preprocess_multimethod(p, s)),
        session,
        reports,
    )
    try:
        yield
    finally:
        if original is None:
            del backend_cls.preprocess_multimethod
        else:
            backend_cls.preprocess_multimethod = original
