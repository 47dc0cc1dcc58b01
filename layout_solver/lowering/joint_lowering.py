"""ExecuTorch's multi-method hook, driven by one joint solve (both backends).

`to_edge_transform_and_lower({"prefill": ep1, "decode": ep2}, ...)` hands a
backend every partition of every method at once through
`BackendDetails.preprocess_multimethod`. Inside `joint_preprocess(...)` that
hook preprocesses each partition once, in its own thread, one thread running
at a time:

1. *collect*: each partition's preprocess runs until its solver pass has built
   its problem, hands the problem here and waits (or until it ends, for a
   partition whose pass never reached the solver);
2. one `multimethod.solve_jointly` over all of them (methods weighted, shared
   constants linked, identical groups served from the cache);
3. *apply*: each waiting preprocess goes on in turn with its share of the joint
   answer (after checking it built the same problem) and finishes.

A backend's own passes therefore run once per partition, as in a lowering
without weights (profiled, a 4-layer Llama's joint Vulkan lowering spent 30 s
of its 109 s preprocessing every partition a second time when the collect
phase ran on a throw-away copy). Single-method programs take the stock path unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from layout_solver.core.multimethod import JointResult, PartitionProblem, SubproblemCache, solve_jointly
from layout_solver.core.problem import Problem, Solution, problem_digest
from layout_solver.lowering.pass_report import PARTITION, count_waiting_from_here, current_partition, waited
from layout_solver.lowering.provenance import tensor_bytes

log = logging.getLogger(__name__)


class _Abandoned(Exception):
    """Raised in a partition waiting at its solve when another partition's preprocess failed."""


class _PartitionRun:
    """One partition's preprocess in its own thread, so it can wait at its solve for the joint answer: `waiting`
    is set when it waits there or has ended, `resume` lets it go on."""

    def __init__(self, key: str, preprocess: Callable[[], object]):
        self.key, self.result, self.error = key, None, None
        self.waiting, self.resume = threading.Event(), threading.Event()
        self._preprocess = preprocess
        # A thread starts in an empty context and its own grad mode: it runs in a copy of the lowering thread's
        # (the reports' collector, the session), with its grad mode.
        self._context, self._grad = contextvars.copy_context(), torch.is_grad_enabled()
        self.thread = threading.Thread(target=self._context.run, args=(self._main,), name=f"layout-solver {key}")
        self.thread.daemon = True

    def _main(self) -> None:
        PARTITION.set(self.key)
        count_waiting_from_here()
        torch.set_grad_enabled(self._grad)
        try:
            self.result = self._preprocess()
        except BaseException as exc:  # noqa: BLE001 - handed to the lowering's thread, which raises it
            self.error = exc
        finally:
            self.waiting.set()

    def run_until_waiting(self) -> None:
        """Start the preprocess and block until it waits at its solve or ends."""
        self.thread.start()
        self.waiting.wait()

    def finish(self):
        """Let the preprocess go on and block until it ends; its result, or its error raised."""
        self.resume.set()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def per_thread_pass(cls: type, make: Callable[[], object]):
    """One pass object for a backend's global pass registry that is a separate `make()` instance (of `cls`) in
    each thread: a joint lowering pauses each partition's preprocess inside the solver pass, in its own thread,
    and the next partition's must not overwrite the paused one's per-graph state (its snapshot, report, program).
    Every attribute read or written goes to this thread's instance; a special method (`__call__`) is the class's,
    run on this object, and reaches the instance through it."""

    def instance(proxy):
        local = object.__getattribute__(proxy, "_per_thread")
        made = getattr(local, "instance", None)
        if made is None:
            made = local.instance = make()
        return made

    class PerThread(cls):
        def __init__(self):  # nothing of cls's own: each thread's instance is `make()`
            object.__setattr__(self, "_per_thread", threading.local())

        def __getattribute__(self, name):
            return getattr(instance(self), name)

        def __setattr__(self, name, value):
            setattr(instance(self), name, value)

    PerThread.__name__ = PerThread.__qualname__ = cls.__name__
    return PerThread()


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
    abandoned: bool = False
    runs: dict[str, _PartitionRun] = field(default_factory=dict)
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


def bound_to_joint_answer() -> bool:
    """Whether the partition being preprocessed must keep its share of the joint answer: it is in a joint
    lowering and one of its values is linked to another partition's (a constant stored once, shared state). A
    partition that shares nothing may take another answer of its own, as a lowering without weights would."""
    if not in_joint_lowering():
        return False
    session, key = _session.get(), current_partition()
    if key not in session.collected:  # not collected (yet): nothing says it shares nothing
        return True
    mine = set(session.collected[key].links.values())
    return any(mine & set(other.links.values()) for name, other in session.collected.items() if name != key)


def solve_partition(
    problem: Problem, solve_fn: Callable[[Problem], Solution], links: Callable[[], dict[str, str]]
) -> Solution:
    """What the backends' solver passes call instead of solving directly.

    `links()` gives the partition's linked values; it hashes every constant, so it
    is called only when collecting for a joint solve, never on the ordinary path.
    Outside a joint lowering: `solve_fn(problem)`. Collect phase: record the
    problem and wait (the partition's thread) until the joint answer is served.
    Then: the joint answer for this partition, or `solve_fn(problem)` (with a
    note) if the pass built a different problem than the one it collected.
    """
    session, key = _session.get(), current_partition()
    if session is None or session.phase not in ("collect", "apply") or not key:
        return solve_fn(problem)
    if session.phase == "collect" and key not in session.collected and key in session.runs:
        method, index = key.rsplit("#", 1)
        session.collected[key] = PartitionProblem(method, int(index), problem, links())
        session.digests[key] = problem_digest(problem)
        run = session.runs[key]
        run.waiting.set()
        started = time.perf_counter()
        run.resume.wait()
        waited(time.perf_counter() - started)
        if session.abandoned:
            raise _Abandoned(f"{key}: another partition's preprocess failed")
    solution = session.solutions.get(key)
    if solution is None or session.digests.get(key) != problem_digest(problem):
        solution = solve_fn(problem)
        solution.notes.append(
            f"{key}: not part of the joint solve (its problem changed between the phases); solved on its own"
        )
    return solution


def _abandon(session: _Session, runs: list[_PartitionRun]) -> None:
    """Wake every partition still waiting at its solve so it unwinds (`_Abandoned`), and wait for it to end."""
    session.abandoned = True
    for run in runs:
        if run.thread.is_alive():
            run.resume.set()
            run.thread.join()


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
        session.abandoned = False
        token = _session.set(session)
        runs = [
            _PartitionRun(f"{method}#{index}", functools.partial(cls.preprocess, program, spec))
            for method, programs in edge_programs.items()
            for index, (program, spec) in enumerate(zip(programs, compile_specs[method], strict=True))
        ]
        session.runs = {run.key: run for run in runs}
        try:
            session.phase = "collect"
            for run in runs:  # one at a time: the backend's passes never run side by side
                run.run_until_waiting()
                if run.error is not None:
                    raise run.error
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
            out: dict[str, list] = {method: [] for method in edge_programs}
            for run in runs:
                out[run.key.rsplit("#", 1)[0]].append(run.finish())
            return out
        finally:
            _abandon(session, runs)
            session.phase = "idle"
            session.runs = {}
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
