"""OR-Tools CP-SAT for pieces the exact combinatorial solvers do not cover.

Model: one Boolean per (variable, option), exactly one per variable. For each
value and each label L some consumer may want, `pay[a, L]` (cost c(value, a, L))
may be true only if the value is stored as a, and every consumer option that
reads the value in L requires some `pay[., L]` or "stored as L". A transition
shared by many consumers is therefore paid once.
The search starts from the greedy answer and stops at the time limit with
the best answer found and the bound it proved.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layout_solver.solvers.subproblem import SubResult, Subproblem, integer_scale

_MAX_COEF = 2**40


def solve_cpsat(sub: Subproblem, hint: SubResult, time_limit: float, workers: int = 1) -> SubResult:
    model = cp_model.CpModel()
    choose = [[model.new_bool_var(f"x{v}_{o}") for o in range(n)] for v, n in enumerate(sub.n_options)]
    for lits in choose:
        model.add_exactly_one(lits)
    terms: list[tuple[float, object]] = []  # (cost, literal)
    const = sub.offset
    for v, costs in enumerate(sub.unary):
        for o, c in enumerate(costs):
            if c:
                terms.append((c, choose[v][o]))
    for f in sub.factors:
        targets = set(f.const_req)
        for reqs in f.cons_reqs:
            for r in reqs:
                targets |= r
        # own label -> literal meaning "the value is stored in that label" (None: always)
        if f.src_var < 0:
            own = {f.src_labels[0]: None}
        else:
            own = {}
            for o, label in enumerate(f.src_labels):
                own.setdefault(label, []).append(choose[f.src_var][o])
            for label, lits in list(own.items()):
                if len(lits) == 1:
                    own[label] = lits[0]
                else:
                    is_label = model.new_bool_var(f"own{f.value}_{label}")
                    model.add_bool_or(lits).only_enforce_if(is_label)
                    for lit in lits:
                        model.add_implication(lit, is_label)
                    own[label] = is_label
        for dst in targets:
            if dst in f.const_req:
                # Always needed: pay c(a, dst) whenever the value is stored as a.
                for label, is_label in own.items():
                    c = sub.cost(f.value, label, dst) if label != dst else 0.0
                    if c and is_label is None:
                        const += c
                    elif c:
                        terms.append((c, is_label))
                continue
            if dst in own and own[dst] is None:
                continue  # stored as dst already: never a transition
            # pay[a] may be 1 only if the value is stored as a; every consumer
            # option that reads dst forces sum(pay) + [stored as dst] >= 1.
            # Tighter than pay >= stored_a + wants - 1 once choices are fractional.
            pay = {}
            for label, is_label in own.items():
                if label == dst:
                    continue
                pay[label] = model.new_bool_var(f"p{f.value}_{label}_{dst}")
                if is_label is not None:
                    model.add_implication(pay[label], is_label)
                c = sub.cost(f.value, label, dst)
                if c:
                    terms.append((c, pay[label]))
            covered = list(pay.values()) + ([own[dst]] if dst in own else [])
            for var, reqs in zip(f.cons_vars, f.cons_reqs):
                for o, r in enumerate(reqs):
                    if dst in r:
                        model.add_bool_or(covered + [choose[var][o].Not()])
    costs = [c for c, _ in terms]
    scale, slack = integer_scale(costs, _MAX_COEF)
    model.minimize(sum(int(round(c * scale)) * lit for c, lit in terms))
    for v, o in enumerate(hint.options):
        for k, lit in enumerate(choose[v]):
            model.add_hint(lit, k == o)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.001)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SubResult(options=list(hint.options), value=hint.value, bound=max(hint.bound, const), method="cpsat-timeout")
    options = [next(o for o, lit in enumerate(lits) if solver.boolean_value(lit)) for lits in choose]
    value = sub.total(options)
    bound = const + solver.best_objective_bound / scale - slack
    if status == cp_model.OPTIMAL and slack == 0.0:
        bound = value
    method = "cpsat" if status == cp_model.OPTIMAL else "cpsat-timeout"
    if hint.value < value:
        options, value = list(hint.options), hint.value
    return SubResult(options=options, value=value, bound=min(bound, value), method=method)
