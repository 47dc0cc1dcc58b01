"""Writes the tuning notebooks (kept as code here so diffs stay readable). Run: python notebooks/build_notebooks.py

Each notebook runs in the test suite on a small configuration; set LAYOUT_SOLVER_FULL=1 for the full one.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent


def notebook(cells):
    nb = new_notebook(cells=[new_markdown_cell(c[3:]) if c.startswith("md:") else new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


CALIBRATE = [
    (
        "md:# Calibrating the Ethos-U55 transpose model against Vela\n\n"
        "`cost_models.ethos_u55` replays how Vela 5.1 decomposes a TRANSPOSE into U55 ops and prices each op from a "
        "table of cycles per element. This notebook measures that table with one-op TOSA graphs through Vela "
        "(`ethos-u55-128`), then checks the whole model on a held-out sweep of random transposes (ranks 2-5: every "
        "permutation up to rank 4, sampled at rank 5; 1K-1M elements; int8 and int16), compiled by Vela as given and in "
        "canonical form. The default run is small; `LAYOUT_SOLVER_FULL=1` runs the full calibration and writes "
        "`cost_models/data/ethos_u55_v2.json`."
    ),
    (
        "import os, statistics\nfrom collections import defaultdict\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
        "from cost_models.calibration import fit_ethos_u55 as cal\n"
        "from cost_models.ethos_u55 import load_params, transpose_cost, WIDEST_INNER\n"
        "FULL = os.environ.get('LAYOUT_SOLVER_FULL') == '1'\n"
        "DTYPES = ('int8', 'int16') if FULL else ('int8',)\n"
        "PER_PERM, RANK5 = (12, 150) if FULL else (1, 10)\n"
        "shipped = load_params()"
    ),
    (
        "md:## Calibration sweep and fit\n\nThe small run measures only a few input innermost dims; keys it misses fall "
        "back to the table's default rate, so its accuracy below is a lower bound of what the full run gives."
    ),
    (
        "if FULL:\n    params, counts = cal.calibrate()\nelse:\n"
        "    params, counts = cal.calibrate(dtypes=DTYPES, inners=(1, 2, 3, 4, 8, 16, 64), decomposed_count=150)\n"
        "counts, {dt: len(t.op_rates) for dt, t in params.tables.items()}"
    ),
    "md:## Accuracy on the held-out sweep",
    (
        "held = [c for dt in DTYPES for c in cal.sweep(seed=2, per_perm=PER_PERM, rank5=RANK5, dtypes=(dt,))]\n"
        "{(name, dt, form): cal.accuracy([c for c in held if c.dtype == dt and c.form == form], p)\n"
        " for name, p in (('this fit', params), ('shipped', shipped)) for dt in DTYPES for form in ('as_given', 'canonical')}"
    ),
    (
        "pred = [transpose_cost(c.shape, c.perm, c.dtype, params=shipped, form='as_given').cycles for c in held]\n"
        "vela = [c.vela_cycles for c in held]\nerrs = cal.errors(held, shipped)\n"
        "fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))\n"
        "a.loglog(vela, pred, '.', alpha=0.6); lim = [min(vela), max(vela)]; a.plot(lim, lim, 'k--', lw=1)\n"
        "a.set_xlabel('Vela cycles'); a.set_ylabel('model cycles'); a.set_title('held-out transposes (shipped model)')\n"
        "b.hist(errs, bins=30); b.set_xlabel('relative error'); b.set_yscale('log'); b.set_title('error distribution')\n"
        "fig.tight_layout()"
    ),
    "md:## Error by rank and by Vela op count",
    (
        "by = defaultdict(list)\nfor e, c in zip(errs, held):\n    by[(len(c.shape), c.vela_ops)].append(e)\n"
        "{k: (len(v), round(statistics.median(v), 3), round(max(v), 3)) for k, v in sorted(by.items())}"
    ),
    (
        "md:## The rate table: cycles per element of one U55 transpose op\n\n"
        "Rows: the input's innermost dim (33 = wider than 32). Columns: the output's innermost dim class. Multiples of "
        "the 8-element block read fastest; 4, 8 and 16 at the output let Vela write whole blocks."
    ),
    (
        "fig, axes = plt.subplots(1, 2, figsize=(10, 6), sharey=True)\nclasses = ['4', '8', '16', 'other']\n"
        "for ax, dt in zip(axes, ('int8', 'int16')):\n"
        "    rates = shipped.rates(dt).op_rates\n"
        "    grid = np.array([[rates.get(f'move_inner:{i}:{o}:wide', np.nan) for o in classes]\n"
        "                     for i in range(1, WIDEST_INNER + 2)])\n"
        "    im = ax.imshow(grid, aspect='auto', cmap='viridis', extent=(-0.5, 3.5, WIDEST_INNER + 1.5, 0.5))\n"
        "    ax.set_xticks(range(4), classes); ax.set_title(f'{dt}: move_inner, wide'); ax.set_xlabel('output innermost')\n"
        "axes[0].set_ylabel('input innermost dim'); fig.colorbar(im, ax=axes); None"
    ),
    (
        "if FULL:\n    cal.write_params(params, notes={f'held_out_{dt}': cal.accuracy([c for c in held if c.dtype == dt], params)"
        "\n                                    for dt in DTYPES})\n    print('parameters written')"
    ),
]

VULKAN = [
    (
        "md:# Vulkan cost model: how optimal layouts move with the parameters\n\n"
        "Capture the Vulkan layout problem of a few zoo models once (a real lowering through the solver pass), then "
        "re-price every transition under scaled parameters and re-solve. Shows which answers are robust and which "
        "depend on the parameters. `LAYOUT_SOLVER_FULL=1` uses the whole zoo."
    ),
    (
        "import os, dataclasses, logging, warnings\nimport matplotlib.pyplot as plt\nimport torch\n"
        "warnings.filterwarnings('ignore'); logging.getLogger().setLevel(logging.WARNING)\n"
        "from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner\n"
        "from executorch.exir import to_edge_transform_and_lower\n"
        "from cost_models import vulkan as vk\nfrom layout_solver import solve\n"
        "from layout_solver.lowering.pass_report import collecting_reports\nfrom layout_solver.vulkan import hooks, passes, rules\nfrom layout_solver.zoo.models import build, ZOO\n"
        "FULL = os.environ.get('LAYOUT_SOLVER_FULL') == '1'\n"
        "MODELS = list(ZOO) if FULL else ['resnet8', 'convnext_stack']"
    ),
    (
        "def capture(name):\n    problems = []\n"
        "    class Capture(passes.SolverTagMemoryMetaPass):\n"
        "        def call(self, gm):\n            problems.append(rules.build_problem(gm, self.texture_limits, name).problem)\n"
        "            return super().call(gm)\n"
        "    module, inputs = build(name)\n"
        "    with collecting_reports(), hooks.substituted_pass(Capture):\n"
        "        to_edge_transform_and_lower(torch.export.export(module, inputs), partitioner=[VulkanPartitioner()])\n"
        "    return problems\n\nproblems = {m: capture(m) for m in MODELS}\n"
        "{m: [len(p.ops) for p in ps] for m, ps in problems.items()}"
    ),
    (
        "base = vk.load_profile('mobile-gpu')\n\ndef scaled(field, s):\n"
        "    p = dict(base.parameters)\n    p[field] = p[field].model_copy(update={'value': p[field].value * s})\n"
        "    return base.model_copy(update={'parameters': p})\n\ndef repriced(problem, params):\n"
        "    values = {v.id: v for v in problem.values}\n"
        "    costs = [t.model_copy(update={'cost': round(vk.transition_cost(values[t.value].shape, values[t.value].dtype, "
        "t.src, t.dst, params), 3)}) for t in problem.transition_costs]\n"
        "    return problem.model_copy(update={'transition_costs': costs})\n\n"
        "def study(field, scales):\n    rows = []\n    for s in scales:\n"
        "        params = scaled(field, s)\n"
        "        for m, ps in problems.items():\n            sols = [solve(repriced(p, params)) for p in ps]\n"
        "            rows.append((s, m, sum(len(x.transitions) for x in sols), sum(x.objective for x in sols)))\n"
        "    return rows"
    ),
    (
        "fields = ['dispatch_overhead_us', 'packed_dim_change_factor', 'buffer_op_penalty_per_mib']\n"
        "scales = [0.25, 1, 4, 16, 64]\nresults = {f: study(f, scales) for f in fields}"
    ),
    (
        "fig, axes = plt.subplots(1, len(fields), figsize=(4 * len(fields), 3.5))\n"
        "for ax, f in zip(axes, fields):\n    for m in MODELS:\n"
        "        pts = [(s, n) for s, mm, n, _ in results[f] if mm == m]\n"
        "        ax.semilogx(*zip(*pts), 'o-', label=m)\n"
        "    ax.set_title(f); ax.set_xlabel('scale'); ax.set_ylabel('transitions')\naxes[0].legend(); fig.tight_layout()"
    ),
    (
        "md:Transitions that appear only at extreme scales mark answers that depend on the parameter; flat lines are "
        "robust. With the shipped parameters (scale 1) the zoo needs no transition at all."
    ),
]

VULKAN_DEVICE = [
    (
        "md:# Vulkan on the device: predicted against measured program time\n\n"
        "Lowers zoo models with the stock TagMemoryMetaPass and with the solver (priced by the `lavapipe` profile, "
        "measured by `layout-solver calibrate vulkan`), runs both programs on the present Vulkan device "
        "(`LAYOUT_SOLVER_VULKAN_RUNTIME` names the runtime plugin) and sets the profile's predicted change in run time "
        "against the measured one. `LAYOUT_SOLVER_FULL=1` uses the whole zoo; "
        "`benchmarks/vulkan/runtime.py` is the same comparison as a table."
    ),
    (
        "import os, logging, warnings\nimport matplotlib.pyplot as plt\n"
        "warnings.filterwarnings('ignore'); logging.getLogger().setLevel(logging.WARNING)\n"
        "from layout_solver.zoo.runner import compare_named\nfrom layout_solver.zoo.models import ZOO\n"
        "FULL = os.environ.get('LAYOUT_SOLVER_FULL') == '1'\n"
        "MODELS = list(ZOO) if FULL else ['ds_cnn', 'resnet8']\n"
        "results = {m: compare_named(m, 'vulkan', execute=True, cost_profile='lavapipe', rounds=21 if FULL else 9).to_json() for m in MODELS}\n"
        "for m, r in results.items():\n"
        "    print(f\"{m:16} stock {r['stock']['run_ms']:8.2f} ms  solver {r['solver']['run_ms']:8.2f} ms  \"\n"
        "          f\"measured {r['measured_delta_us']:9.0f} us  predicted {r['predicted_delta_us']:9.0f} us\")"
    ),
    (
        "fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))\n"
        "xs = [r['predicted_delta_us'] for r in results.values()]; ys = [r['measured_delta_us'] for r in results.values()]\n"
        "ax1.scatter(xs, ys)\nfor m, x, y in zip(results, xs, ys):\n    ax1.annotate(m, (x, y), fontsize=8)\n"
        "lim = max(1.0, *map(abs, xs + ys)) * 1.1\nax1.plot([-lim, lim], [-lim, lim], 'k--', lw=0.8)\n"
        "ax1.set_xlabel('predicted change solver - stock (us)'); ax1.set_ylabel('measured change (us)')\n"
        "ax1.set_title('predicted against measured')\n"
        "idx = range(len(results))\n"
        "ax2.bar([i - 0.2 for i in idx], [r['stock']['run_ms'] for r in results.values()], 0.4, label='stock')\n"
        "ax2.bar([i + 0.2 for i in idx], [r['solver']['run_ms'] for r in results.values()], 0.4, label='layout-solver')\n"
        "ax2.set_xticks(list(idx), list(results), rotation=30, ha='right'); ax2.set_ylabel('median ms'); ax2.legend()\n"
        "ax2.set_title('run time on the device'); fig.tight_layout()"
    ),
]

ZOO_REPORT = [
    (
        "md:# Zoo report\n\nRuns (or resumes) a zoo: stock executorch versus layout-solver on every model x target, "
        "and shows the tables and plots. `LAYOUT_SOLVER_FULL=1` runs the whole built-in zoo on both targets; the default "
        "is a quick one. Results are cached under `zoo-out/`, so re-running only lowers what is missing."
    ),
    (
        "import os\nfrom pathlib import Path\nfrom IPython.display import Image, Markdown, display\n"
        "from layout_solver.zoo.runner import run_zoo\nfrom layout_solver.zoo.models import ZOO\n"
        "FULL = os.environ.get('LAYOUT_SOLVER_FULL') == '1'\n"
        "MODELS = list(ZOO) if FULL else [os.environ.get('ZOO_REPORT_MODEL', 'ds_cnn')]\n"
        "TARGETS = ['ethos-u55-128', 'vulkan']\nOUT = Path(os.environ.get('ZOO_REPORT_OUT', 'zoo-out/notebook'))"
    ),
    (
        "results = run_zoo(MODELS, TARGETS, OUT, jobs=2, log=lambda line: None)\n"
        "display(Markdown((OUT / 'report.md').read_text()))"
    ),
    (
        "for png in ('transpose_cycles.png', 'transitions.png', 'solve_time_vs_size.png'):\n"
        "    display(Image(filename=str(OUT / png)))"
    ),
]

ARM_PRICING = [
    (
        "md:# The Arm stage's prediction against Vela, per operator class, on Ethos-U55 and Ethos-U85\n\n"
        "The stage prices every op in every mode, and every transpose, by compiling a small TOSA probe with Vela for "
        "the lowering's own target (`layout_solver.arm.pricing`); the objective is the delegate's predicted NPU "
        "cycles. A probe prices one op exactly; what it can miss is the whole program's context (what Vela fuses, "
        "chains, copies or schedules around it). This notebook lowers models the probes never saw with the stage "
        '(`verify="model"`: its own layout, not the cheaper of it and stock\'s), splits the prediction by the '
        "operator class Vela names its rows after, and sets it against Vela's per-layer table of the same program, "
        "for ethos-u55-128 and ethos-u85-256. The default run takes three small models; `LAYOUT_SOLVER_FULL=1` the "
        "Arm zoo."
    ),
    (
        "import os\nfrom pathlib import Path\nimport matplotlib.pyplot as plt\nfrom IPython.display import Markdown, "
        "display\nfrom layout_solver.zoo.runner import compare_named\nfrom layout_solver.zoo.models import ARM_ZOO\n"
        "FULL = os.environ.get('LAYOUT_SOLVER_FULL') == '1'\n"
        "TINY = Path(os.environ.get('ARM_PRICING_MODELS', 'tests/models/tiny.py'))\n"
        "MODELS = list(ARM_ZOO) if FULL else [f'{TINY}:{m}' for m in ('residual', 'group_norm_8', 'attention')]\n"
        "TARGETS = ('ethos-u55-128', 'ethos-u85-256')"
    ),
    (
        "rows = []\nfor target in TARGETS:\n    for model in MODELS:\n"
        "        r = compare_named(model, target, verify='model').to_json()['solver']\n"
        "        predicted, vela = r.get('predicted_cycles_by_op', {}), r.get('vela_cycles_by_op', {})\n"
        "        for op in set(predicted) | set(vela):\n"
        "            rows.append((target, model.rpartition(':')[2], op, predicted.get(op, 0.0), vela.get(op, 0)))\n"
        "        rows.append((target, model.rpartition(':')[2], 'TOTAL', r['predicted_total_cycles'], "
        "r['vela_total_cycles']))\n"
        "lines = ['| target | model | operator | predicted | Vela | error |', '|---|---|---|---|---|---|']\n"
        "for t, m, op, p, v in rows:\n"
        "    lines.append(f'| {t} | {m} | {op} | {p:,.0f} | {v:,} | {(p / v - 1) if v else float(\"nan\"):+.1%} |')\n"
        "display(Markdown('\\n'.join(lines)))"
    ),
    (
        "md:## Per operator class\n\nEach point is one operator class of one model: the stage's predicted cycles "
        "against Vela's. Points on the diagonal are priced as the program pays them; the totals are the squares."
    ),
    (
        "fig, axes = plt.subplots(1, len(TARGETS), figsize=(12, 5))\n"
        "for ax, target in zip(axes, TARGETS):\n"
        "    pts = [(v, p, op) for t, m, op, p, v in rows if t == target and v > 0 and p > 0]\n"
        "    for v, p, op in pts:\n"
        "        ax.scatter(v, p, marker='s' if op == 'TOTAL' else 'o', s=40 if op == 'TOTAL' else 18)\n"
        "        if op != 'TOTAL':\n            ax.annotate(op, (v, p), fontsize=6)\n"
        "    lo, hi = min(min(v, p) for v, p, _ in pts), max(max(v, p) for v, p, _ in pts)\n"
        "    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)\n"
        "    ax.set_xscale('log'); ax.set_yscale('log')\n"
        "    ax.set_xlabel('Vela cycles'); ax.set_ylabel('predicted cycles'); ax.set_title(target)\n"
        "fig.tight_layout()"
    ),
]

if __name__ == "__main__":
    for name, cells in (
        ("calibrate_ethos_u55", CALIBRATE),
        ("vulkan_cost_model", VULKAN),
        ("vulkan_device", VULKAN_DEVICE),
        ("zoo_report", ZOO_REPORT),
        ("arm_pricing", ARM_PRICING),
    ):
        nbformat.write(notebook(cells), HERE / f"{name}.ipynb")
        print("wrote", HERE / f"{name}.ipynb")
