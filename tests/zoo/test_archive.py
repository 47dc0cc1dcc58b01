"""A zoo run's cache as one compressed file: packed the same bytes every time, read back as the cache."""

import json

from layout_solver.zoo.archive import ARCHIVE, pack, restore


def _cache(out, results):
    (out / "cache").mkdir(parents=True, exist_ok=True)
    for key, result in results.items():
        (out / "cache" / f"{key}.json").write_text(json.dumps(result))


def test_an_archive_restores_every_result_and_packs_the_same_bytes_again(tmp_path):
    results = {"b2": {"model": "ds_cnn", "target": "vulkan", "status": "ok"}, "a1": {"model": "x", "status": "error"}}
    _cache(tmp_path / "run", results)
    first = pack(tmp_path / "run").read_bytes()
    _cache(tmp_path / "again", dict(reversed(results.items())))
    assert pack(tmp_path / "again").read_bytes() == first  # sorted, no timestamp: the same results, the same bytes
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ARCHIVE).write_bytes(first)
    assert restore(fresh) == 2
    assert {p.stem: json.loads(p.read_text()) for p in (fresh / "cache").glob("*.json")} == results


def test_a_result_in_the_cache_is_newer_than_the_archived_one(tmp_path):
    _cache(tmp_path, {"k": {"status": "old"}})
    pack(tmp_path)
    (tmp_path / "cache" / "k.json").write_text(json.dumps({"status": "new"}))
    assert restore(tmp_path) == 0
    assert json.loads((tmp_path / "cache" / "k.json").read_text()) == {"status": "new"}
    assert restore(tmp_path / "nothing-here") == 0
