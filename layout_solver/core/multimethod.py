"""Several partitions of several methods as one problem: join, solve once, split.

A program with several methods (prefill and decode, two input resolutions)
reaches a backend as a list of partitions per method. Each partition is a
`Problem` of its own; this module joins them into one:

* Ids are prefixed with the partition's key (``decode#0/``), every op is
  tagged with its method (``Op.graph``), and every cost of a method is scaled
  by that method's weight (how often it runs per use of the program).
* Values that are physically one object are *linked*: a constant with the same
  bytes, a buffer with the same fully qualified name. Linked constants become
  one value of the joint problem, so they get one home label; an extra layout
  of one is an extra stored copy, priced at ``size_bytes * constant_byte_cost``
  (paid once, not per run). Other linked values (a buffer each method reads as
  an input) are checked to agree after solving.
* Partitions that no link connects are independent; each group of linked
  partitions is solved as one problem, and a group equal to one solved before
  (same structure, shapes and costs up to renaming) is served from a
  content-addressed cache instead of being solved again.

Nothing here imports torch: the backends' adapters build the partition
problems and the links, this module only does the arithmetic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from layout_solver.core.evaluate import TransitionPricer, evaluate
from layout_solver.core.problem import Mode, Op, Problem, ProblemError, Solution, TransitionCost, Value

SEPARATOR = "/"


@dataclass(frozen=True)
class PartitionProblem:
    """One partition's problem, the method it belongs to, and its linked values (value id -> link key)."""

    method: str
    index: int
    problem: Problem
    links: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The partition's name ("method#index")."""
        return f"{self.method}#{self.index}"

    def prefixed(self, value_or_op: str) -> str:
        """The id this partition's value or op `value_or_op` has in the joint problem."""
        return f"{self.key}{SEPARATOR}{value_or_op}"


@dataclass
class JointResult:
    """Per-partition solutions of one joint solve, and what it cost."""

    solutions: dict[str, Solution] = field(repr=False)  # partition key -> its solution, in the partition's own ids
    objective: float  # weighted: sum of weight x partition cost, plus extra stored constant copies
    bound: float
    groups: int  # independently solved groups of linked partitions
    cache_hits: int
    linked_values: int  # link keys (same-bytes constants, same-name buffers) found in more than one partition
    merged_values: int  # joint values standing for several partitions' values (only where storage is priced)
    solve_seconds: float
    notes: list[str] = field(default_factory=list)


def _wanted_labels(problem: Problem) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    for op in problem.ops:
        for mode in op.modes:
            for vid, label in zip(op.operands, mode.operands):
                wanted.setdefault(vid, set()).add(label)
    return wanted


def merged_keys(parts: list[PartitionProblem], constant_byte_cost: float = 0.0) -> set[str]:
    """Link keys whose values become one value of the joint problem.

    Only constants merge (they are one stored object), only when the same key
    has the same shape and dtype everywhere, only when where they are stored
    can cost something: with free constant transitions (the backends' default)
    and no storage price, a merged constant could take any home label at no
    cost, so merging would change nothing but the problem's size; and only when
    every label an op of any partition reads it in is one every partition allows
    (the merged value's domain is their intersection: an op reading it in a
    label one partition does not allow would be left with no valid mode).
    """
    if constant_byte_cost <= 0 and not any(p.problem.price_constants for p in parts):
        return set()
    members: dict[str, list[Value]] = {}
    read_in: dict[str, set[str]] = {}
    for part in parts:
        by_id = {v.id: v for v in part.problem.values}
        wanted = _wanted_labels(part.problem)
        for vid, key in part.links.items():
            if vid in by_id:
                members.setdefault(key, []).append(by_id[vid])
                read_in.setdefault(key, set()).update(wanted.get(vid, ()))
    return {
        key
        for key, vals in members.items()
        if len(vals) > 1
        and all(v.kind == "constant" for v in vals)
        and len({(tuple(v.shape), v.dtype) for v in vals}) == 1
        and read_in[key] <= set.intersection(*(set(v.domain) for v in vals))
    }


def join(
    parts: list[PartitionProblem], weights: dict[str, float], constant_byte_cost: float = 0.0, name: str = "joint"
) -> tuple[Problem, dict[str, dict[str, str]]]:
    """One problem over `parts`: ids prefixed, costs scaled by the method's weight, linked values merged.

    Returns the problem and, per partition key, the map from the partition's value ids to the joint ids.
    Raises ProblemError if a method has no (or a non-positive) weight.
    """
    for part in parts:
        weight = weights.get(part.method)
        if weight is None or not weight > 0:
            raise ProblemError(f"method {part.method!r} needs a positive weight, got {weight!r}")
    mergeable = merged_keys(parts, constant_byte_cost)
    value_ids: dict[str, dict[str, str]] = {}
    joint_values: dict[str, Value] = {}
    costs: dict[tuple[str, str, str], float] = {}  # summed over the methods that may run the transition
    storage: dict[tuple[str, str, str], float] = {}  # an extra copy of a shared constant: stored once
    ops: list[Op] = []
    price_constants = any(p.problem.price_constants for p in parts) or constant_byte_cost > 0
    for part in parts:
        weight = weights[part.method]
        pricer = TransitionPricer(part.problem)
        wanted = _wanted_labels(part.problem)
        produced = {
            vid: {m.results[i] for m in op.modes} for op in part.problem.ops for i, vid in enumerate(op.results)
        }
        rename = value_ids.setdefault(part.key, {})
        for value in part.problem.values:
            key = part.links.get(value.id)
            shared = key in mergeable
            jid = f"shared{SEPARATOR}{key}" if shared else part.prefixed(value.id)
            rename[value.id] = jid
            if jid in joint_values:
                before = joint_values[jid]
                domain = [label for label in before.domain if label in value.domain]
                fixed = {f for f in (before.fixed, value.fixed) if f is not None}
                if not domain or len(fixed) > 1 or (fixed and next(iter(fixed)) not in domain):
                    raise ProblemError(
                        f"linked value {key!r} has no label both {before.id!r} and {part.prefixed(value.id)!r} allow",
                        values=[jid],
                    )
                joint_values[jid] = before.model_copy(update={"domain": domain, "fixed": next(iter(fixed), None)})
            else:
                joint_values[jid] = value.model_copy(update={"id": jid})
            # Every price this value can incur, written out: the joint default is 0.
            # Sorted: the joint problem (and so its cache key) must not depend on set iteration order.
            sources = produced.get(value.id) or set(value.domain)
            for src in sorted(sources):
                for dst in sorted(wanted.get(value.id, ())):
                    if src == dst:
                        continue
                    price = weight * pricer(value.id, src, dst)
                    if price > 0:
                        costs[(jid, src, dst)] = costs.get((jid, src, dst), 0.0) + price
                    if shared and constant_byte_cost > 0:
                        storage[(jid, src, dst)] = value.size_bytes * constant_byte_cost
        for op in part.problem.ops:
            ops.append(
                op.model_copy(
                    update={
                        "id": part.prefixed(op.id),
                        "graph": part.method,
                        "operands": [rename[v] for v in op.operands],
                        "results": [rename[v] for v in op.results],
                        "modes": [
                            Mode(name=m.name, operands=m.operands, results=m.results, cost=m.cost * weight)
                            for m in op.modes
                        ],
                    }
                )
            )
    # Merged values are constants: their transitions fold at compile time, so the backends price them 0 and
    # only the stored copy costs. (A partition that prices constant transitions would be charged its price
    # whenever any partition may want that layout: an upper bound.)
    for key, price in storage.items():
        costs[key] = costs.get(key, 0.0) + price
    problem = Problem(
        name=name,
        values=list(joint_values.values()),
        ops=ops,
        transition_costs=[
            TransitionCost(value=v, src=s, dst=d, cost=c)
            for (v, s, d), c in costs.items()
            if s in joint_values[v].domain and d in joint_values[v].domain
        ],
        default_cost_per_byte=0.0,
        price_constants=price_constants,
    )
    return problem, value_ids


def split(
    joint: Problem, solution: Solution, parts: list[PartitionProblem], value_ids: dict[str, dict[str, str]]
) -> dict[str, Solution]:
    """The joint solution as one Solution per partition, in the partition's own ids and unscaled costs."""
    out = {}
    for part in parts:
        rename = value_ids[part.key]
        modes = {op.id: solution.modes[part.prefixed(op.id)] for op in part.problem.ops}
        produced = {v for op in part.problem.ops for v in op.results}
        free = {vid: solution.labels[jid] for vid, jid in rename.items() if vid not in produced}
        result = evaluate(part.problem, modes, free)
        notes = list(solution.notes)
        if solution.status == "optimal":
            bound, gap = result.objective, 0.0
        else:  # the joint bound is over all partitions: no bound of this partition's own is known but 0
            bound, gap = 0.0, (1.0 if result.objective > 0 else 0.0)
            notes.append(f"part of a joint answer with gap {solution.gap:.3g}; this partition's own bound is unknown")
        out[part.key] = Solution(
            problem=part.problem.name,
            status=solution.status,
            labels=result.labels,
            modes=modes,
            transitions=result.transitions,
            objective=result.objective,
            bound=bound,
            gap=gap,
            timings=dict(solution.timings),
            notes=notes,
        )
    return out


def weighted_objective(
    joint: Problem, parts: list[PartitionProblem], value_ids: dict[str, dict[str, str]], solutions: dict[str, Solution]
) -> float:
    """The joint objective of per-partition solutions (e.g. each partition solved on its own).

    Where partitions store a merged constant differently, the joint answer keeps
    the cheapest of their labels as its home (the others read extra copies);
    for fixed modes the objective is separable per value, so this is exact.
    """
    modes, free, candidates = {}, {}, {}
    for part in parts:
        solution = solutions[part.key]
        produced = {v for op in part.problem.ops for v in op.results}
        modes.update({part.prefixed(op_id): mode for op_id, mode in solution.modes.items()})
        for vid, jid in value_ids[part.key].items():
            if vid not in produced:
                free.setdefault(jid, solution.labels[vid])
                candidates.setdefault(jid, set()).add(solution.labels[vid])
    domains = {v.id: v.domain for v in joint.values}
    for jid, labels in candidates.items():
        # A partition alone may store the constant where the merged value (the partitions' common labels) may
        # not: its home is then the cheapest common label.
        labels = [label for label in sorted(labels) if label in domains[jid]] or domains[jid]
        if len(labels) > 1 or free[jid] not in labels:
            free[jid] = min(labels, key=lambda label: evaluate(joint, modes, {**free, jid: label}).objective)
    return evaluate(joint, modes, free).objective


def canonical(problem: Problem) -> tuple[Problem, dict[str, str], dict[str, str]]:
    """`problem` with values renamed v0, v1, ... and ops o0, o1, ... in their order; the two renamings.

    Two problems whose canonical forms are equal are the same problem up to
    renaming (same structure, shapes, labels and costs): one's solution serves the other.
    """
    values = {v.id: f"v{i}" for i, v in enumerate(problem.values)}
    ops = {o.id: f"o{i}" for i, o in enumerate(problem.ops)}
    renamed = Problem.model_construct(
        schema_version=problem.schema_version,
        name="canonical",
        values=[v.model_copy(update={"id": values[v.id]}) for v in problem.values],
        ops=[
            o.model_copy(
                update={
                    "id": ops[o.id],
                    "graph": "main",
                    "operands": [values[x] for x in o.operands],
                    "results": [values[x] for x in o.results],
                }
            )
            for o in problem.ops
        ],
        transition_costs=[t.model_copy(update={"value": values[t.value]}) for t in problem.transition_costs],
        default_cost_per_byte=problem.default_cost_per_byte,
        price_constants=problem.price_constants,
    )
    return renamed, values, ops


class SubproblemCache:
    """Solutions by canonical digest, in memory and (optionally) in a directory shared across runs.

    The disk side is the service's `SolutionCache` (atomic writes, size-bounded);
    a hit is renamed back into the asking problem's ids.
    """

    def __init__(self, directory=None):
        from layout_solver.core.solution_cache import SolutionCache

        self.memory: dict[str, tuple[dict, dict]] = {}  # digest -> (modes by op position, labels by value position)
        self.disk = SolutionCache(directory) if directory is not None else None
        self.hits = 0
        self.misses = 0

    def _key(self, problem: Problem) -> str:
        from layout_solver.core.solution_cache import cache_key

        return cache_key(canonical(problem)[0])

    def get(self, problem: Problem) -> tuple[dict[str, str], dict[str, str]] | None:
        """(modes, labels of unproduced values) in `problem`'s ids, or None."""
        key = self._key(problem)
        found = self.memory.get(key)
        if found is None and self.disk is not None:
            entry = self.disk.get(key)
            if entry is not None and entry.status == "optimal":
                found = tuple(json.loads(entry.solution_json))
                self.memory[key] = found
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        by_op, by_value = found
        modes = {o.id: by_op[str(i)] for i, o in enumerate(problem.ops)}
        free = {v.id: by_value[str(i)] for i, v in enumerate(problem.values) if str(i) in by_value}
        return modes, free

    def put(self, problem: Problem, solution: Solution) -> None:
        """Remember an optimal `solution` of `problem` (in memory and, with a directory, on disk); other answers are
        not stored.
        """
        if solution.status != "optimal":
            return  # a time-limited answer must not stand in for a better one later
        from layout_solver.core.solution_cache import CacheEntry

        produced = {v for op in problem.ops for v in op.results}
        by_op = {str(i): solution.modes[o.id] for i, o in enumerate(problem.ops)}
        by_value = {str(i): solution.labels[v.id] for i, v in enumerate(problem.values) if v.id not in produced}
        key = self._key(problem)
        self.memory[key] = (by_op, by_value)
        if self.disk is not None:
            self.disk.put(key, CacheEntry(json.dumps([by_op, by_value]).encode(), "optimal", 0.0))


def _groups(parts: list[PartitionProblem], merged: set[str]) -> list[list[PartitionProblem]]:
    """Partitions connected by a merged value, in input order: each group is one problem."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(len(parts)))
    seen: dict[str, int] = {}
    for i, part in enumerate(parts):
        for key in set(part.links.values()) & merged:
            if key in seen:
                graph.add_edge(seen[key], i)
            seen.setdefault(key, i)
    return [[parts[i] for i in sorted(c)] for c in sorted(nx.connected_components(graph), key=min)]


def _link_labels(parts: list[PartitionProblem], solutions: dict[str, Solution]) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for part in parts:
        for vid, key in part.links.items():
            if vid in solutions[part.key].labels:
                labels.setdefault(key, set()).add(solutions[part.key].labels[vid])
    return labels


def solve_jointly(
    parts: list[PartitionProblem],
    weights: dict[str, float],
    solve_fn: Callable[[Problem], Solution],
    constant_byte_cost: float = 0.0,
    cache: SubproblemCache | None = None,
) -> JointResult:
    """Solve every group of linked partitions as one weighted problem; reuse cached identical groups.

    `solve_fn(problem)` solves one problem (in-process or through the service).
    Each group's answer is never worse on the weighted objective than solving
    its partitions one by one: when a group's search stops early, the
    per-partition answers are tried too and the cheaper one is kept.
    """
    start = time.perf_counter()
    cache = cache if cache is not None else SubproblemCache()
    solutions: dict[str, Solution] = {}
    objective = bound = 0.0
    merged = 0
    hits_before = cache.hits
    notes: list[str] = []
    groups = _groups(parts, merged_keys(parts, constant_byte_cost))
    for group in groups:
        joint, value_ids = join(group, weights, constant_byte_cost, name="joint:" + ",".join(p.key for p in group))
        merged += sum(1 for v in joint.values if v.id.startswith("shared" + SEPARATOR))
        cached = cache.get(joint)
        if cached is not None:
            modes, free = cached
            result = evaluate(joint, modes, free)
            solution = Solution(
                problem=joint.name,
                status="optimal",
                labels=result.labels,
                modes=modes,
                transitions=result.transitions,
                objective=result.objective,
                bound=result.objective,
                gap=0.0,
                timings={},
                notes=["served from the cache"],
            )
        else:
            solution = solve_fn(joint)
            cache.put(joint, solution)
        per_part = split(joint, solution, group, value_ids)
        if solution.status != "optimal" and len(group) > 1:
            alone = {p.key: solve_fn(p.problem) for p in group}
            alone_cost = weighted_objective(joint, group, value_ids, alone)
            if alone_cost < solution.objective:
                per_part, solution = alone, solution.model_copy(update={"objective": alone_cost})
                notes.append(f"{joint.name}: the joint search stopped early; per-partition answers were cheaper")
        solutions.update(per_part)
        objective += solution.objective
        bound += min(solution.bound, solution.objective)
    shared = {
        key: labels
        for key, labels in _link_labels(parts, solutions).items()
        if sum(key in p.links.values() for p in parts) > 1
    }
    for key, labels in shared.items():
        if len(labels) > 1 and key.startswith("buffer:"):  # state both methods keep must agree on its layout
            notes.append(f"linked value {key!r} is stored as {sorted(labels)} by different partitions")
    return JointResult(
        solutions,
        objective,
        bound,
        len(groups),
        cache.hits - hits_before,
        len(shared),
        merged,
        time.perf_counter() - start,
        notes,
    )
