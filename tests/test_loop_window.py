"""The loop's training window by model age (--max-model-age): files are chosen by the models that
played their games, as named in their manifests (a local loop's folder k: gen k-1's model)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.selfplay.run_folder import RunWriter, manifest_path, read_manifest
from train.loop.config import RunPaths
from train.loop.steps import window_files


def game_file(folder: Path, name: str, models: list[str] | None) -> Path:
    """A non-empty hcpe3 stand-in; with `models`, a manifest line per game naming its model."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.hcpe3"
    path.write_bytes(b"game")
    if models is not None:
        rows = [json.dumps({"id": i, "model": m, "node": "n"}) for i, m in enumerate(models)]
        manifest_path(path).write_text("".join(r + "\n" for r in rows))
    return path


def test_only_games_of_young_models_are_trained_on(tmp_path):
    paths = RunPaths(tmp_path / "run")
    local = game_file(paths.selfplay(1), "a-local", None)  # a local loop's: gen 0 played it
    g2_gen0 = game_file(paths.selfplay(2), "a", ["gen0", "gen0"])
    g2_gen1 = game_file(paths.selfplay(2), "b", ["gen1"])
    g3_gen1 = game_file(paths.selfplay(3), "a", ["gen1", "gen1"])
    g3_gen2 = game_file(paths.selfplay(3), "b", ["gen2"])
    mixed = game_file(paths.selfplay(3), "c", ["gen2", "gen0"])  # one game too old: the file is out
    foreign = game_file(paths.selfplay(3), "d", ["3f2a9c"])  # a model of no generation
    every = [local, g2_gen0, g2_gen1, g3_gen1, g3_gen2, mixed, foreign]
    assert window_files(paths, 3, 100) == every  # off: today's window, the newest files of any model
    assert window_files(paths, 3, 100, max_age=1) == [g3_gen2]
    assert window_files(paths, 3, 100, max_age=2) == [g2_gen1, g3_gen1, g3_gen2]
    assert window_files(paths, 3, 100, max_age=3) == [local, g2_gen0, g2_gen1, g3_gen1, g3_gen2, mixed]
    assert window_files(paths, 3, 2, max_age=2) == [g3_gen1, g3_gen2]  # --window still caps the count
    assert window_files(paths, 2, 100, max_age=1) == [g2_gen1]


def test_a_writer_by_model_gives_each_model_its_own_file(tmp_path):
    writer = RunWriter(tmp_path, by_model=True)
    for game_id, model in enumerate(["gen0", "gen1", "gen0", "gen1", "gen1"]):
        writer.write(game_id, b"x" * 40, {"model": model, "node": "n"})
    writer.close()
    assert len(writer.paths) == 2 and all(p.is_file() for p in writer.paths)
    by_file = [[r["model"] for r in read_manifest(manifest_path(p))] for p in writer.paths]
    assert sorted(by_file) == [["gen0", "gen0"], ["gen1", "gen1", "gen1"]]
