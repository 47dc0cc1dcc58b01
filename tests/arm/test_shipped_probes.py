"""The Vela probe answers shipped with the package: served after the cache folder's own, equal to what Vela
compiles, and written the same way every time."""

import pytest

from benchmarks.arm import ship_probes
from cost_models import vela


@pytest.fixture
def shipped_file(tmp_path, monkeypatch):
    """Point the shipped answers at a file of this test's own; forget them again afterwards."""
    path = tmp_path / "shipped" / "vela_probes.json.gz"
    monkeypatch.setattr(vela, "SHIPPED_PROBES", path)
    vela.shipped_probes.cache_clear()
    yield path
    vela.shipped_probes.cache_clear()


def test_a_shipped_answer_is_served_in_place_of_a_compile_and_equals_it(tmp_path, monkeypatch, shipped_file):
    shape, perm = (1, 8, 8, 16), (0, 3, 1, 2)
    harvest = tmp_path / "harvest"
    compiled = vela.measure_transpose(shape, perm, cache_dir=harvest)  # Vela compiles it into harvest's store
    answers = ship_probes.cached_answers(harvest)
    assert len(answers) == 1
    ship_probes.write_shipped({"probes": answers, "vela_version": vela.vela_version()}, shipped_file)

    monkeypatch.setenv(vela.CACHE_ENV, str(tmp_path / "empty-cache"))
    store = vela.default_store()
    served = vela.measure_transpose(shape, perm)
    assert (served.cycles, served.rows) == (compiled.cycles, compiled.rows)
    assert (store.shipped_hits, store.misses) == (1, 0)  # read from the shipped file, not compiled

    # Opted out, or a store that is not the cache folder's: Vela compiles it.
    monkeypatch.setenv(vela.CACHE_ENV, str(tmp_path / "another-empty-cache"))
    monkeypatch.setenv(vela.SHIPPED_PROBES_ENV, "0")
    opted_out = vela.default_store()
    assert vela.measure_transpose(shape, perm).cycles == compiled.cycles
    assert (opted_out.shipped_hits, opted_out.misses) == (0, 1)
    monkeypatch.delenv(vela.SHIPPED_PROBES_ENV)
    own = vela.ProbeStore(None)
    assert vela.compile_probe(vela.transpose_probe(shape, perm), store=own).cycles == compiled.cycles
    assert (own.shipped_hits, own.misses) == (0, 1)


def test_the_folders_own_answer_comes_before_the_shipped_one(tmp_path, monkeypatch, shipped_file):
    key = "shared-key"
    ship_probes.write_shipped({"probes": {key: [[0, "Transpose", 999, "t", "TRANSPOSE"]]}}, shipped_file)
    monkeypatch.setenv(vela.CACHE_ENV, str(tmp_path / "cache"))
    store = vela.default_store()
    assert store.get(key).cycles == 999  # shipped
    store.networks.clear()
    store.memory.clear()
    store.put(key, vela.VelaNetwork((vela.VelaLayer(0, "Transpose", 7, "t", "TRANSPOSE"),)))
    store.networks.clear()
    store.memory.clear()
    assert store.get(key).cycles == 7  # the folder's own answer wins


def test_the_package_ships_answers_for_the_installed_vela_in_reproducible_bytes(tmp_path):
    contents = ship_probes.read_shipped()
    assert contents["probes"], "the package ships no probe answers"
    # Keyed by the Vela version among other things: for another version the file would serve nothing.
    assert contents["vela_version"] == vela.vela_version()
    assert contents["store_format"] == vela.STORE_FORMAT
    for rows in list(contents["probes"].values())[:50]:
        vela.VelaNetwork.from_json(rows)  # every answer decodes as the store's own do
    again = tmp_path / "again.json.gz"
    ship_probes.write_shipped(contents, again)
    assert again.read_bytes() == vela.SHIPPED_PROBES.read_bytes()
