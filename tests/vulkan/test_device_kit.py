"""The Vulkan device kit, run here on lavapipe as it would run on a GPU machine: built from a zoo model and a
few probes, run by its own native runner through run.sh, its outputs bit for bit those of the project's own
Vulkan execution of the same programs, and read back into a table and a profile that a second kit prices with."""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("executorch.backends.vulkan")

from cost_models.vulkan import load_profile
from layout_solver.targets.vulkan.device_kit import build, read
from layout_solver.targets.vulkan.device_kit.manifest import Kit
from layout_solver.targets.vulkan.device_kit.read import load_outputs
from layout_solver.targets.vulkan.runtime import execute
from layout_solver.zoo.models import build as build_model

pytestmark = pytest.mark.xdist_group("device_kit")  # one kit, built once, for every test here
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1",
                    "ld-linux-x86-64.so.2"}  # fmt: skip
MODEL = "ds_cnn"  # one transition stock's way that the lavapipe profile drops: the kit holds two programs


def _run(kit: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # the kit finds its own libraries
    return subprocess.run(
        ["bash", str(kit / "run.sh"), *args], check=False, capture_output=True, text=True, timeout=900, env=env
    )


@pytest.fixture(scope="module")
def first_kit(runtime, tmp_path_factory):
    """A kit of MODEL (stock, the default objective, lavapipe's profile) and the unary probes at one shape,
    run once."""
    top = tmp_path_factory.mktemp("kit") / "kit"
    kit = top / "part-1"  # a kit this small is one part
    build(
        [MODEL], build_model, top, objectives=("default", "lavapipe"), runtime=runtime, probe_ops=["unary"],
        probe_shapes=[(1, 8, 32, 32)], rounds=5, passes=2, jobs=2, log=lambda line: None,
    )  # fmt: skip
    done = _run(kit, str(kit.parent / "results.tgz"))
    assert done.returncode == 0, done.stdout + done.stderr
    return kit


def test_the_kit_travels_and_its_runner_needs_no_python(first_kit):
    assert not (first_kit.parent / "part-2").exists()
    packed = [f for f in first_kit.rglob("*") if f.is_file() and f.suffix != ".pte" and "results" not in f.parts]
    assert sum(f.stat().st_size for f in packed if not f.is_relative_to(first_kit / "lib")) < 56 * 2**20
    assert (first_kit / "lib.tar.xz").is_file() and list((first_kit / "bundles").glob("*.tar.xz"))
    assert (first_kit.parent / "results.tgz").stat().st_size > 0
    # The runner and the libraries it carries need nothing but each other and the C/C++ runtime: no Python, no
    # torch, no executorch installed.
    carried = {f.name for f in (first_kit / "lib").iterdir()}
    for binary in [first_kit / "vk_runner", *(first_kit / "lib").iterdir()]:
        dynamic = subprocess.run(["readelf", "-d", str(binary)], check=True, capture_output=True, text=True).stdout
        needed = set(re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic))
        assert needed, binary
        assert needed <= carried | SYSTEM_LIBRARIES, (binary.name, needed - carried - SYSTEM_LIBRARIES)


def test_the_kit_runner_gives_the_projects_outputs_bit_for_bit(first_kit, runtime):
    kit = Kit.model_validate_json((first_kit / "kit.json").read_text())
    (entry,) = kit.models
    assert entry.error is None
    assert entry.sides["lavapipe"].sha256 != entry.sides["stock"].sha256, "the kit should hold two programs"
    _, inputs = build_model(MODEL)
    programs = {name: (first_kit / side.pte).read_bytes() for name, side in entry.sides.items()}
    ran = execute(programs, inputs, runtime=runtime, time_runs=False)
    for name, side in entry.sides.items():
        assert ran[name].executed, ran[name].error
        mine = load_outputs(first_kit / "results", side.program)
        assert not isinstance(mine, str), mine
        assert [a.shape for a in mine] == [b.shape for b in ran[name].outputs]
        assert all(a.tobytes() == b.tobytes() for a, b in zip(mine, ran[name].outputs)), name


def test_reading_the_results_gives_a_table_and_a_profile_a_second_kit_prices_with(first_kit, runtime, tmp_path):
    # as it comes back from a device machine: the packed results, unpacked over whatever results/ holds
    (first_kit / "results" / "times" / f"{MODEL}.1.json").write_text("{}")
    report, profile_path = read(first_kit, "test", [first_kit.parent / "results.tgz"])
    assert f"| {MODEL} | lavapipe | differs | 1 / 0 |" in report
    assert "identical" in report  # the default and lavapipe programs compute stock's outputs exactly here
    times = json.loads((first_kit / "results" / "times" / f"{MODEL}.1.json").read_text())
    assert all(len(t["ms"]) == 5 for t in times.values())
    profile = load_profile(profile_path)
    assert profile.measured and "llvmpipe" in profile.device
    assert set(profile.op_modes["unary"]) >= {"TEXTURE_3D:TENSOR_CHANNELS_PACKED", "BUFFER:TENSOR_WIDTH_PACKED"}
    assert profile.transitions, "the clone probes gave no transition"
    # asked to, the programs' own dispatches (stock's clone among them) are fitted with the probes'
    assert "own programs" not in profile.notes[-1]
    read(first_kit, "test", with_programs=True)
    assert "samples from the kit's own programs' dispatches" in profile_path.read_text()
    read(first_kit, "test")

    # The second round: programs priced by the profile the first kit measured.
    second = tmp_path / "second"
    build([MODEL], build_model, second, objectives=(str(profile_path),), runtime=runtime, probe_ops=[], rounds=3, passes=1,
          jobs=1, log=lambda line: None)  # fmt: skip
    assert _run(second / "part-1").returncode == 0
    report, profile_path = read(second)  # the kit's folder: its parts are found
    assert profile_path is None  # no probes in this kit
    row = next(line for line in report.splitlines() if line.startswith(f"| {MODEL} | profile |"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[4] != "-" and cells[6] != "-", row  # stock's time and the paired ratio were read
    assert cells[8] != "-", row  # both programs' dispatches were profiled: the device's own change beside it


def test_the_runner_reports_a_bad_input_by_program(first_kit, tmp_path):
    plan = (first_kit / "programs.tsv").read_text().splitlines()[0].split("\t")
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 12)
    (tmp_path / "p.pte").symlink_to(first_kit / plan[1])  # a plan's paths are relative to its folder
    (tmp_path / "plan.tsv").write_text("bad\tp.pte\tforward\tshort.bin\n")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["LD_LIBRARY_PATH"] = str(first_kit / "lib")
    runner = [str(first_kit / "vk_runner"), str(first_kit / "lib" / "libvkbackend.so")]
    command = [*runner, "outputs", str(tmp_path / "plan.tsv"), str(tmp_path)]
    done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    assert done.returncode == 0
    answer = json.loads((tmp_path / "bad.outputs.json").read_text())
    assert "has 12 bytes" in answer["error"]
    assert np.prod(build_model(MODEL)[1][0].shape) * 4 == int(answer["error"].split("wants ")[1])


def _staged_models(staging: Path, sizes_mib: list[float]):
    """A staging kit of incompressible programs of these sizes, two sides each sharing one program."""
    from layout_solver.targets.vulkan.device_kit.manifest import ModelEntry, Side

    rng = np.random.default_rng(0)
    for sub in ("lib", "profiles", "programs", "inputs", "expected"):
        (staging / sub).mkdir(parents=True)
    (staging / "lib" / "libexecutorch.so").write_bytes(rng.bytes(2**20))
    (staging / "vk_runner").write_bytes(rng.bytes(4096))
    entries, lines = [], {}
    for k, mib in enumerate(sizes_mib):
        key, pte, given = f"m{k}", f"programs/m{k}.pte", f"inputs/m{k}.in0.bin"
        (staging / pte).write_bytes(rng.bytes(int(mib * 2**20)))
        (staging / given).write_bytes(rng.bytes(64))
        np.save(staging / f"expected/{key}.out0.npy", np.zeros(4))
        side = {"pte": pte, "sha256": "0", "transitions": 0, "modelled_us_by_profile": {}, "pass_seconds": 0.0}
        sides = {name: Side(program=f"{key}~{name}", **side) for name in ("stock", "default")}
        entries.append(
            ModelEntry(name=key, key=key, inputs=[given], expected=[f"expected/{key}.out0.npy"], sides=sides)
        )
        lines[key] = [(s.program, pte, [given]) for s in sides.values()]
    return Kit(built="-", command="-", executorch="1.5.1", objectives=["default"], warmup=1, rounds=1, passes=1,
               probe_warmup=1, probe_rounds=1, models=entries), lines  # fmt: skip


def test_a_kit_too_large_for_one_call_comes_in_parts_each_a_whole_kit_within_the_limit(tmp_path):
    import tarfile

    from layout_solver.targets.vulkan.device_kit.build import KitError, _mib, _pack
    from layout_solver.targets.vulkan.device_kit.read import parts

    manifest, lines = _staged_models(tmp_path / "staging", [3, 3, 2, 1])
    made = _pack(tmp_path / "staging", tmp_path / "kit", manifest, lines, [], 6.0, 2, lambda line: None)
    assert made == parts(tmp_path / "kit") and len(made) == 3  # 1 MiB of libraries beside each: 3+1, 3, 2
    held = []
    for part in made:
        assert _mib(part) <= 6.0
        kit = Kit.model_validate_json((part / "kit.json").read_text())
        assert kit.parts == 3 and kit.models
        packed = set()
        for bundle in (part / "bundles").glob("*.tar.xz"):
            with tarfile.open(bundle) as tar:
                packed |= set(tar.getnames())
        for line in (part / "programs.tsv").read_text().splitlines():  # every file a plan names travels here
            _, pte, _, given = line.split("\t")
            assert {pte, *given.split(",")} <= packed
        held += [m.name for m in kit.models]
    assert sorted(held) == ["m0", "m1", "m2", "m3"]  # each model in one part
    manifest, lines = _staged_models(tmp_path / "again", [5])
    with pytest.raises(KitError, match="m0 .* exceed what one part holds"):
        _pack(tmp_path / "again", tmp_path / "kit2", manifest, lines, [], 6.0, 2, lambda line: None)
