"""Write the Vela probe answers shipped with the package (`cost_models/data/vela_probes.json.gz`).

Each model is lowered with the stage for each target, in this process, from an empty probe cache with the shipped
answers unread, so every probe the lowering prices is compiled by Vela and stored; the stored answers are then
merged into the shipped file (or, with `--from`, the answers of existing cache folders are). The file is keyed as
the probe store keys its answers (probe content, configuration, Vela version, store format): a lowering on another
Vela or configuration reads none of it, and an answer read from it is the one Vela gives (the probes compile the
same every time; determinism.md).

Run: .venv/bin/python -m benchmarks.arm.ship_probes [--models zoo] [--targets ethos-u55-128,ethos-u85-256]
        [--from CACHE_DIR ...] [--replace]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from cost_models import vela
from cost_models.store import CACHE_ENV

TARGETS = ("ethos-u55-128", "ethos-u85-256")


def cached_answers(folder: Path) -> dict[str, list]:
    """The probe answers stored in a cache folder's probes.sqlite, by key (none where it has no such file)."""
    path = Path(folder) / "probes.sqlite"
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        return {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM store")}


def no_answers() -> dict:
    """The contents of a shipped file with no answers yet, for this Vela: answers and what they came from."""
    return {"probes": {}, "vela_version": vela.vela_version(), "store_format": vela.STORE_FORMAT, "lowered": []}


def read_shipped(path: Path = vela.SHIPPED_PROBES) -> dict:
    """The shipped file's contents, or `no_answers()` where there is none."""
    if not path.exists():
        return no_answers()
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return json.load(file)


def write_shipped(contents: dict, path: Path = vela.SHIPPED_PROBES) -> None:
    """Write the shipped file: sorted keys, no timestamp or file name in the gzip header, so the same answers give
    the same bytes."""
    text = json.dumps(contents, sort_keys=True, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as file:
        file.write(text.encode("utf-8"))


def lower_with_stage(model: str, target: str) -> None:
    """Lower `model` for `target` with the stage (its own pricing: the probes are what it prices with)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver import arm
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.ethos_u.measure import quantize
    from layout_solver.zoo.models import build

    module, inputs = build(model)
    spec = EthosUCompileSpec(target)
    quantized = quantize(module, inputs, spec)
    with quiet(), arm.solver_layouts(verify="model"):
        to_edge_transform_and_lower(quantized, partitioner=[EthosUPartitioner(spec)]).to_executorch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="zoo", help="models or sets (zoo, outside), comma-separated")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--from", dest="folders", nargs="*", default=None, help="merge these cache folders instead")
    parser.add_argument("--replace", action="store_true", help="start from no answers instead of the shipped ones")
    args = parser.parse_args()
    contents = read_shipped()
    if args.replace or contents.get("vela_version") != vela.vela_version():
        contents = no_answers()
    before = len(contents["probes"])
    if args.folders is not None:
        for folder in args.folders:
            contents["probes"].update(cached_answers(Path(folder)))
    else:
        from layout_solver.zoo.models import expand_names

        models = expand_names(args.models.split(","))
        targets = args.targets.split(",")
        with tempfile.TemporaryDirectory() as cache:
            os.environ[CACHE_ENV] = cache
            os.environ[vela.SHIPPED_PROBES_ENV] = "0"  # compile every probe the lowering needs
            for target in targets:
                for model in models:
                    started = time.perf_counter()
                    try:
                        lower_with_stage(model, target)
                        status = "lowered"
                    except Exception as exc:  # noqa: BLE001 - a model that does not lower adds no probes
                        status = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
                    print(f"{target} {model}: {status} in {time.perf_counter() - started:.0f} s; "
                          f"{len(vela.default_store())} probe answers so far", flush=True)  # fmt: skip
                    if status == "lowered":
                        contents["lowered"] = sorted(set(contents["lowered"]) | {f"{target} {model}"})
            contents["probes"].update(cached_answers(Path(cache)))
    write_shipped(contents)
    size = vela.SHIPPED_PROBES.stat().st_size
    print(f"{vela.SHIPPED_PROBES}: {len(contents['probes'])} answers ({before} before), {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
