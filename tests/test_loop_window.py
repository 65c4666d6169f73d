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


def targets_file(path: Path, targets: int, plain: int = 0) -> Path:
    """An hcpe3 file of one game from the start: `targets` moves with a policy target, then `plain`
    moves without one (a fast search's, or an external engine's)."""
    import cshogi
    import numpy as np

    from engine.core.position import board_hcp
    from engine.records.writers import Hcpe3Writer
    from engine.selfplay.writer import GameRecord, to_hcpe3

    board = cshogi.Board()
    record = GameRecord(board_hcp(board))
    for i in range(targets + plain):
        moves = list(board.legal_moves)
        if i < targets:
            cands = np.array([cshogi.move16(m) for m in moves], np.uint16)
            labels = np.arange(len(moves), dtype=np.int64)
            record.add(
                board_hcp(board),
                cshogi.move16(moves[0]),
                0.5,
                cands,
                labels,
                np.full(len(moves), 1 / len(moves)),
            )
        else:
            record.add(board_hcp(board), cshogi.move16(moves[0]), 0.5)
        board.push(moves[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    with Hcpe3Writer(path) as w:
        w.write(to_hcpe3(record))
    return path


def test_window_by_positions_counts_targets_from_the_newest_file(tmp_path):
    from train.loop.steps import count_targets, newest_by_positions

    a = targets_file(tmp_path / "a.hcpe3", 10, plain=30)
    b = targets_file(tmp_path / "b.hcpe3", 6, plain=2)
    c = targets_file(tmp_path / "c.hcpe3", 5)
    assert [count_targets(f) for f in (a, b, c)] == [10, 6, 5]
    assert newest_by_positions([a, b, c], 5) == [c]
    assert newest_by_positions([a, b, c], 6) == [b, c]  # c alone holds 5
    assert newest_by_positions([a, b, c], 11) == [b, c]
    assert newest_by_positions([a, b, c], 12) == [a, b, c]
    assert newest_by_positions([a, b, c], 1000) == [a, b, c]


def test_anchor_share_takes_the_next_files_in_turn(tmp_path):
    import pytest

    from engine.errors import UserError
    from train.loop.config import LoopConfig
    from train.loop.steps import anchor_files

    chunks = [targets_file(tmp_path / "teacher" / f"chunk-{i}.hcpe3", 10) for i in range(5)]
    cfg = LoopConfig(extra_data=str(tmp_path / "teacher"), extra_share=0.5)
    assert anchor_files(cfg, 1, 20) == chunks[:2]  # half of 40 positions: two files of 10
    assert anchor_files(cfg, 2, 20) == chunks[2:4]
    assert anchor_files(cfg, 3, 20) == [chunks[4], chunks[0]]  # round again
    assert anchor_files(LoopConfig(extra_data=str(tmp_path / "teacher"), extra_share=0.2), 1, 1000) == chunks
    assert anchor_files(LoopConfig(extra_data=str(chunks[0])), 7, 5) == [chunks[0]]  # no share: all, always
    with pytest.raises(UserError, match="no hcpe3 records"):
        anchor_files(LoopConfig(extra_data=str(tmp_path), extra_share=0.5), 1, 20)
