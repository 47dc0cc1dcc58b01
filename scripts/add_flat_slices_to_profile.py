"""One-off migration (2026-11-27): give a measured Vulkan profile's samples their flat-slice term.

Samples recorded before `cost_models.vulkan.flat_slices` existed say bytes and texture slices, not the
texture's height. Every probe shape `calibrate vulkan` has used is known (its shape lists, the shapes each
probe's chain writes, and the `--shapes` the shipped profile was extended with), so each texture sample's
shape is found by its bytes and slices; the migration refuses a sample whose candidate shapes disagree on
whether the texture is one texel high. `--join PROFILE` adds another profile's samples of the same device
(points it has that this one lacks, already at this profile's scale), then every fit is refitted.

    python scripts/add_flat_slices_to_profile.py cost_models/data/vulkan_lavapipe.json \
        --join benchmarks/results/lavapipe_with_deep_textures.json
"""

import argparse
import json
import math
from pathlib import Path

from cost_models import vulkan as vk
from layout_solver.targets.vulkan import calibrate as cal

# Not joined: the deep-texture probes' contractions are linears over a last dim of 2-4 (thousands of rows
# of four products), a shape no model has; their time is per row, which the linear fit has no term for, and
# joined they make both linear fits price a sample 5x too cheap ("unfit").
NOT_JOINED = ("op:linear|", "op:matmul|")
EXTENSION_SHAPES = ["1x1x256", "1x1x768", "1x128", "1x384", "1x4x1x64", "64x8x4x4", "256x4x2x2", "1x512x2x2"]


def _written(op: str, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    # What a probe chain of class `op` records from an input of `shape` (transitions: a chain of clones):
    # select's drop of the leading dim, the linear's 4x-wide hidden layer and its output (a view's dispatch
    # is recorded on its input's shape).
    if op == "select":
        return [shape[1:]]
    if op == "linear":
        return [shape, (*shape[:-1], 4 * shape[-1])]
    return [shape]


def candidate_shapes(key: str) -> set[tuple[int, ...]]:
    kind, _, rest = key.partition(":")
    if kind == "op":
        op = rest.partition("|")[0]
        base = set(cal.PROBES[op].shapes + cal.PROBES[op].extra)
    else:
        op, base = "unary", set(cal.SQUARE_4D + cal.DEEP_4D + cal.BATCHED_3D + cal.MATRICES)
    base |= {tuple(int(d) for d in s.split("x")) for s in EXTENSION_SHAPES}
    return {w for s in base for w in _written(op, s) if w}


def _contraction_flat(point: list[float]) -> int | None:
    # A contraction sample from a probe shape no longer listed: its rows per slice follow from its terms
    # (MFLOP = 2 x elements x K, operand bytes = 4 x K x N for a linear's weight; rows = elements / N).
    if len(point) < 5 or not point[3] or not point[4]:
        return None
    elements = point[0] / 4
    contraction = point[3] * 1e6 / (2 * elements)
    rows = elements / (point[4] / 4 / contraction)
    return int(point[1]) if rows / point[1] <= 1 else 0


def texture_label(key: str) -> str:
    kind, _, rest = key.partition(":")
    if kind == "op":
        return rest.partition("|")[2]
    src, dst = rest.split("->")
    return dst if dst.startswith("TEXTURE_3D") else src


def with_flat(key: str, point: list[float]) -> list[float]:
    label, shapes = texture_label(key), candidate_shapes(key)
    if len(point) >= 7 or not point[1]:
        return point
    flats = {
        vk.flat_slices(s, label)
        for s in shapes
        if math.prod(s) * 4 == point[0] and vk.texture_slices(s, label) == point[1]
    }
    if not flats and _contraction_flat(point) is not None:
        flats = {_contraction_flat(point)}
    if len(flats) != 1:
        raise SystemExit(f"{key}: sample {point} matches shapes that disagree on flatness ({flats or 'none'})")
    flat = flats.pop()
    return [*point, *[0.0] * (6 - len(point)), float(flat)] if flat else point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--join", help="another profile of the same device whose extra samples join")
    args = parser.parse_args()
    raw = json.loads(Path(args.profile).read_text())
    samples = {k: [with_flat(k, p) for p in pts] for k, pts in raw["samples"].items()}
    joined = 0
    if args.join:
        other = json.loads(Path(args.join).read_text())["samples"]
        for key, pts in other.items():
            if key.startswith(NOT_JOINED):
                continue
            have = {tuple(p[:3]) for p in raw["samples"].get(key, [])}
            new = [with_flat(key, p) for p in pts if tuple(p[:3]) not in have]
            samples.setdefault(key, []).extend(new)
            joined += len(new)
    for key, pts in samples.items():
        fit = vk.fit_samples([tuple(p) for p in pts]).model_dump()
        kind, _, rest = key.partition(":")
        if kind == "op":
            op, label = rest.split("|")
            raw["op_modes"].setdefault(op, {})[label] = fit
        else:
            raw["transitions"][rest] = fit
    flat = sum(1 for pts in samples.values() for p in pts if len(p) >= 7 and p[6])
    raw["samples"] = samples
    raw["notes"].append(
        f"flat slices (cost_models.vulkan.flat_slices) given to {flat} samples by their probe shapes"
        + (f"; {joined} samples joined from {Path(args.join).name}" if args.join else "")
        + f"; every fit refitted (scripts/{Path(__file__).name})"
    )
    Path(args.profile).write_text(json.dumps(raw, indent=1) + "\n")
    print(raw["notes"][-1])


if __name__ == "__main__":
    main()
