"""A piece as a 0-1 linear program: the one formulation the CP-SAT and MIP backends both solve.

Booleans: one per (variable, option), exactly one per variable; and, for each
value and each label L some consumer may want, `pay[a, L]` (cost c(value, a, L)),
allowed only if the value is stored as a:

    pay[a, L] <= sum of the options that store the value as a
    sum_a pay[a, L] + [stored as L] >= x[consumer, option]   for every option reading L

so a transition shared by many consumers is paid once. A label every consumer
needs (`const_req`) is priced straight on the options that store the value
elsewhere. The LP relaxation of this model is tight on real graphs (benchmarks/results/
solver.md), which is why a MIP solver closes gaps that CP-SAT's own bound
leaves open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from layout_solver.core.solvers.subproblem import Subproblem


@dataclass
class LinearModel:
    """A 0/1 model of a subproblem for CP-SAT or MIP: one Boolean per (variable, option), implications and
    covers linking transition indicators to choices, and a linear objective over the Booleans."""

    n_bools: int
    choose: list[list[int]]  # per variable, per option: its Boolean
    implies_any: list[tuple[int, list[int]]] = field(default_factory=list)  # b -> OR(lits)
    covers: list[tuple[list[int], int]] = field(default_factory=list)  # x -> OR(lits)
    objective: dict[int, float] = field(default_factory=dict)  # Boolean -> cost
    constant: float = 0.0

    @property
    def nonzeros(self) -> int:
        """Entries of the constraint matrix: what building the model and its root processing grow with."""
        count = sum(len(lits) for lits in self.choose) + sum(1 + len(lits) for _, lits in self.implies_any)
        return count + sum(len(lits) + 1 for lits, _ in self.covers)

    def new_bool(self) -> int:
        """A new 0/1 variable."""
        self.n_bools += 1
        return self.n_bools - 1

    def add_cost(self, b: int, cost: float) -> None:
        """Add `cost` times Boolean `b` to the objective."""
        if cost:
            self.objective[b] = self.objective.get(b, 0.0) + cost


def formulate(sub: Subproblem) -> LinearModel:
    """The 0/1 formulation of a subproblem: one-hot choices per variable, a priced indicator per transition a factor
    may need."""
    choose, n = [], 0
    for count in sub.n_options:
        choose.append(list(range(n, n + count)))
        n += count
    model = LinearModel(n, choose, constant=sub.offset)
    for v, costs in enumerate(sub.unary):
        for o, c in enumerate(costs):
            model.add_cost(choose[v][o], c)
    for f in sub.factors:
        targets = set(f.const_req)
        for reqs in f.cons_reqs:
            for r in reqs:
                targets |= r
        # own label -> the Booleans meaning "the value is stored in that label" (None: always)
        own: dict[int, list[int] | None]
        if f.src_var < 0:
            own = {f.src_labels[0]: None}
        else:
            own = {}
            for o, label in enumerate(f.src_labels):
                own.setdefault(label, []).append(choose[f.src_var][o])
        for dst in targets:
            if dst in own and own[dst] is None:
                continue  # stored as dst already: never a transition
            if dst in f.const_req:
                for label, lits in own.items():
                    c = sub.cost(f.value, label, dst) if label != dst else 0.0
                    if lits is None:
                        model.constant += c
                    else:
                        for lit in lits:
                            model.add_cost(lit, c)
                continue
            pays = []
            for label, lits in own.items():
                if label == dst:
                    continue
                pay = model.new_bool()
                pays.append(pay)
                if lits is not None:
                    model.implies_any.append((pay, lits))
                model.add_cost(pay, sub.cost(f.value, label, dst))
            covered = pays + (own.get(dst) or [])
            for var, reqs in zip(f.cons_vars, f.cons_reqs):
                for o, r in enumerate(reqs):
                    if dst in r:
                        model.covers.append((covered, choose[var][o]))
    return model
