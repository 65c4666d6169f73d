"""Outputs that cannot be written fail first, in one line, and failed runs leave nothing behind.

(As root a chmod'ed folder is writable, so the portable unwritable place is a path under a file.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.core.network import build, preset, save_checkpoint
from engine.errors import UserError
from engine.records.writers import Hcpe3Writer
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.processes import run_selfplay
from engine.selfplay.writer import GameRecord, GameWriter
from export.onnx_export import export_onnx

ROOT = Path(__file__).resolve().parent.parent
CSA = ROOT / "tests" / "data" / "csa" / "usi_vs_greedy.csa"


def run(script: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def one_error_line(result: subprocess.CompletedProcess, prog: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr
    return lines[0]


@pytest.fixture
def places(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    return tmp_path


def test_convert_output_under_a_file_or_a_directory(places: Path):
    line = one_error_line(run("bin/convert", "csa-to-hcpe", CSA, "-o", "afile/x.hcpe", cwd=places), "convert")
    assert line == "convert: error: -o afile/x.hcpe: cannot be created: afile is a file, not a directory"
    line = one_error_line(run("bin/convert", "hcpe3-cache", CSA, "-o", "adir", cwd=places), "convert")
    assert line == "convert: error: -o adir: is a directory; give a file name"


def test_onnx_export_checks_its_destination_before_the_work(places: Path):
    with pytest.raises(UserError, match="afile is a file"):
        export_onnx(places / "no-such-checkpoint.pt", places / "afile" / "o.onnx")  # checked before loading
    save_checkpoint(places / "m.pt", build(preset("tiny")))
    line = one_error_line(run("export/onnx_export.py", "m.pt", "afile/o.onnx", cwd=places), "onnx_export")
    assert "afile/o.onnx: cannot be created: afile is a file" in line


def test_selfplay_out_checked_and_no_folder_left_by_a_failed_run(places: Path):
    line = one_error_line(run("bin/selfplay", "--out", "afile/sp", "--games", "1", cwd=places), "selfplay")
    assert line == "selfplay: error: --out afile/sp: cannot be created: afile is a file, not a directory"
    with pytest.raises(UserError, match="missing.pt"):
        run_selfplay(SelfPlayConfig(out_dir=places / "new" / "sp", model=str(places / "missing.pt"), games=1))
    assert not (places / "new").exists()


@pytest.mark.parametrize("fmt", ["hcpe3", "data"])
def test_selfplay_writer_creates_its_file_with_the_first_game(tmp_path: Path, fmt: str):
    path = tmp_path / "sp" / f"games.{fmt}"
    GameWriter(path, fmt).close()  # stopped before any game finished
    assert not (tmp_path / "sp").exists()  # no 0-byte file for the trainer to trip over
    board = cshogi.Board()
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    game = GameRecord(hcp, result=1)
    move = next(iter(board.legal_moves))
    game.add(
        hcp, cshogi.move16(move), 0.5, np.array([cshogi.move16(move)], np.uint16), np.array([0]), np.ones(1)
    )
    writer = GameWriter(path, fmt)
    writer.put(game)
    writer.close()
    assert path.stat().st_size > 0


def test_hcpe3_writer_without_games_leaves_no_file(tmp_path: Path):
    with Hcpe3Writer(tmp_path / "x.hcpe3"):
        pass
    assert not (tmp_path / "x.hcpe3").exists()
