"""Damaged inputs never end a run over a folder: each bad file is skipped with one warning naming it.

The CSA fuzz cuts real records (tests/data/csa, written by our bin/match) at every byte offset and
flips single bytes; cshogi's own CSA parser raises or crashes the interpreter on such files.
"""

from __future__ import annotations

import random
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine.core.features import FEATURES2_NUM
from engine.errors import UserError
from engine.records.formats import HCPE
from engine.records.hcp_check import valid_hcps
from engine.records.hcpe3_games import _games_with_offsets
from train.data import convert, synthetic
from train.data.csa import ENDINGS, parse_csa
from train.data.dataset import open_corpus, plan_sources
from train.data.hcpe3_cache import build_hcpe3_cache
from train.data.readers import read_hcpe
from train.trainer.config import TrainConfig
from train.trainer.run import train

ROOT = Path(__file__).resolve().parent.parent
CSA_DIR = ROOT / "tests" / "data" / "csa"
RECORDS = sorted(CSA_DIR.glob("*.csa"))


def game_ends(text: str) -> list[int]:
    """Byte offset just past each game's end line (`%...`)."""
    ends, offset = [], 0
    for line in text.split("\n"):
        if line.split(",", 1)[0] in ENDINGS:
            ends.append(offset + len(line))
        offset += len(line) + 1
    return ends


def convert_folder(folder: Path, out: Path) -> tuple[Counter, Counter]:
    """csa_to_hcpe over the folder: (counts, warnings per file name); every warning is one line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = convert.csa_to_hcpe([folder], out)
    per_file: Counter = Counter()
    for w in caught:
        text = str(w.message)
        assert "\n" not in text
        name = Path(text.split(":", 1)[0]).name
        assert (folder / name).is_file(), text  # the warning names the damaged file
        per_file[name] += 1
    return counts, per_file


def test_real_records_are_read_like_cshogi_except_tsumi():
    from cshogi import Parser

    for path in RECORDS:
        text = path.read_text()
        for ours, theirs in zip(parse_csa(text), Parser.parse_str(text), strict=True):
            assert (ours.sfen, ours.moves, ours.scores) == (
                theirs.sfen,
                list(theirs.moves),
                list(theirs.scores),
            )
            assert ours.endgame == theirs.endgame and ours.illegal_ply is None
            if ours.endgame != "%TSUMI":  # cshogi scores a mate as a draw; the mated side to move lost
                assert ours.win == theirs.win
    (mate,) = parse_csa((CSA_DIR / "usi_vs_greedy.csa").read_text())
    assert len(mate.moves) % 2 == 0 and mate.win == 2  # Black to move is mated: White won


def test_csa_truncated_at_every_byte_offset(tmp_path: Path):
    folder = tmp_path / "cut"
    folder.mkdir()
    expected_games, expected_warned = 0, set()
    for path in RECORDS:
        data = path.read_bytes()
        ends = game_ends(data.decode())
        for i in range(len(data) + 1):
            name = f"{path.stem}-{i:05d}.csa"
            (folder / name).write_bytes(data[:i])
            expected_games += sum(i >= e for e in ends)
            clean_cut = any(e <= i <= e + 1 for e in ends) or i >= ends[-1]
            if not clean_cut:
                expected_warned.add(name)
    counts, per_file = convert_folder(folder, tmp_path / "out.hcpe")
    assert counts["games"] == expected_games
    assert set(per_file) == expected_warned and max(per_file.values()) == 1
    assert len(read_hcpe(tmp_path / "out.hcpe")) == counts["positions"]


def test_csa_random_byte_flips(tmp_path: Path):
    folder = tmp_path / "flip"
    folder.mkdir()
    rng = random.Random(11)
    games_in = {}
    for path in RECORDS:
        data = path.read_bytes()
        for k in range(250):
            damaged = bytearray(data)
            i = rng.randrange(len(damaged))
            damaged[i] = rng.choice([b for b in range(256) if b != data[i]])
            name = f"{path.stem}-{k:03d}.csa"
            (folder / name).write_bytes(bytes(damaged))
            games_in[name] = len(game_ends(data.decode()))
    counts, per_file = convert_folder(folder, tmp_path / "out.hcpe")
    assert max(per_file.values()) == 1 and len(per_file) > 100  # most flips are noticed
    untouched = sum(n for name, n in games_in.items() if name not in per_file)
    assert untouched <= counts["games"] <= sum(games_in.values())
    read_hcpe(tmp_path / "out.hcpe")


def test_convert_cli_skips_a_cut_file_with_one_warning_line(tmp_path: Path):
    (tmp_path / "in").mkdir()
    data = (CSA_DIR / "usi_vs_greedy.csa").read_bytes()
    (tmp_path / "in" / "whole.csa").write_bytes(data)
    (tmp_path / "in" / "cut.csa").write_bytes(data[: data.index(b"+8855KA") + 3])  # ends inside a move
    result = subprocess.run(
        [sys.executable, str(ROOT / "bin" / "convert"), "csa-to-hcpe", str(tmp_path / "in"), "-o",
         str(tmp_path / "o.hcpe")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = result.stderr.split("convert: warning: ")[1:]  # may follow a progress bar on its line
    assert len(warned) == 1 and warned[0].split("\n")[0].endswith(
        "cut.csa: game 0 is damaged or not CSA (line 17: bad move '+88'); skipped"
    )
    assert "Traceback" not in result.stderr
    assert "games:" in result.stdout and len(read_hcpe(tmp_path / "o.hcpe")) == 60


# --- hcpe / hcpe3 / .data readers ----------------------------------------------------------------------


def flip_to_invalid(data: bytearray, record: int, size: int, rng: random.Random) -> None:
    """Flip one bit of record `record`'s hcp (its first 32 bytes) so that it no longer decodes."""
    while True:
        at = record * size + rng.randrange(32)
        bit = 1 << rng.randrange(8)
        data[at] ^= bit
        if not valid_hcps(np.frombuffer(bytes(data[record * size : record * size + 32]), np.uint8))[0]:
            return
        data[at] ^= bit


def hcpe3_game_offsets(path: Path) -> list[int]:
    return [start for start, _, _ in _games_with_offsets(path)]


@pytest.fixture
def damaged_folder(tmp_path: Path) -> Path:
    """Good hcpe/.data/hcpe3 files beside empty, cut and damaged ones."""
    folder = tmp_path / "records"
    folder.mkdir()
    synthetic.write_hcpe(folder / "good.hcpe", 300, seed=0)
    synthetic.write_data(folder / "good.data", 120, seed=1)
    synthetic.write_hcpe3(folder / "good.hcpe3", 6, seed=2)
    hcpe = bytearray((folder / "good.hcpe").read_bytes())
    hcpe3 = (folder / "good.hcpe3").read_bytes()
    (folder / "empty.hcpe").write_bytes(b"")
    (folder / "empty.hcpe3").write_bytes(b"")  # self-play stopped before its first game, by an old writer
    flipped = bytearray(hcpe)
    flip_to_invalid(flipped, 150, HCPE.itemsize, random.Random(5))  # a record the old 16-record sample missed
    (folder / "flipped.hcpe").write_bytes(bytes(flipped))
    (folder / "ragged.hcpe").write_bytes(bytes(hcpe) + b"\0" * 10)
    starts = hcpe3_game_offsets(folder / "good.hcpe3")
    (folder / "cut.hcpe3").write_bytes(hcpe3[: starts[3] + 50])
    (folder / "midbad.hcpe3").write_bytes(hcpe3[: starts[2]] + b"\xff" * 36 + hcpe3[starts[2] + 36 :])
    (folder / "cut.data").write_bytes((folder / "good.data").read_bytes()[:-100])
    return folder


SKIPPED = {"empty.hcpe", "empty.hcpe3", "flipped.hcpe"}
PARTLY_READ = {"ragged.hcpe", "cut.hcpe3", "midbad.hcpe3", "cut.data"}


def warned_names(caught: list) -> Counter:
    return Counter(Path(str(w.message).split(":", 1)[0]).name for w in caught)


def test_stats_over_a_folder_skips_damaged_and_empty_files(damaged_folder: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = convert.stats([damaged_folder])
    assert warned_names(caught) == Counter(SKIPPED | PARTLY_READ)  # one warning each, the good files none
    messages = " | ".join(str(w.message) for w in caught)
    assert "empty.hcpe3: file is empty; skipped" in messages
    assert (
        "flipped.hcpe: not a hcpe file, or damaged (record 150 does not hold a valid position); skipped"
        in messages
    )
    assert "midbad.hcpe3: damaged (no valid game header" in messages
    assert counts["files"] == 7
    assert counts["games"] == 6 + 3 + 2  # good, cut (3 whole games), midbad (2 before the damage)


def test_training_over_a_folder_skips_damaged_and_empty_files(damaged_folder: Path, tmp_path: Path):
    cfg = TrainConfig(
        data=[str(damaged_folder)], out=str(tmp_path / "run"), network="tiny", batch_size=50, workers=0,
        progress=False, stop_after_steps=2,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train(cfg)
    assert summary["steps"] == 2
    assert SKIPPED | PARTLY_READ <= set(warned_names(caught))


def test_nothing_usable_is_one_error(damaged_folder: Path, tmp_path: Path):
    with pytest.raises(UserError, match=r"flipped\.hcpe: not a hcpe file, or damaged \(record 150"):
        convert.stats([damaged_folder / "flipped.hcpe"])  # the only input: its own error
    with pytest.warns(UserWarning), pytest.raises(UserError, match=r"no usable record files \(3 skipped"):
        convert.stats([damaged_folder / name for name in sorted(SKIPPED)])
    (tmp_path / "e.hcpe3").write_bytes(b"")
    with pytest.warns(UserWarning), pytest.raises(UserError, match=r"no usable hcpe3 files"):
        convert.hcpe3_to_hcpe([damaged_folder / "empty.hcpe3", tmp_path / "e.hcpe3"], tmp_path / "o.hcpe")


def test_fuzzed_record_files_never_crash_a_run(tmp_path: Path):
    """Cut and flipped hcpe/hcpe3/.data files: read, replayed and turned into features without a crash
    (cshogi would take the interpreter down on a position that does not decode)."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    synthetic.write_hcpe(seeds / "s.hcpe", 40, seed=3)
    synthetic.write_data(seeds / "s.data", 4, seed=4)
    synthetic.write_hcpe3(seeds / "s.hcpe3", 3, seed=5)
    folder = tmp_path / "fuzz"
    folder.mkdir()
    rng = random.Random(7)
    for seed in seeds.iterdir():
        data = seed.read_bytes()
        for k in range(60):
            damaged = bytearray(data[: rng.randrange(len(data))] if k % 3 == 0 else data)
            if k % 3:
                for _ in range(k % 3):
                    damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            (folder / f"{k:02d}{seed.suffix}").write_bytes(bytes(damaged))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert.stats([folder])
        convert.hcpe3_to_hcpe([folder], tmp_path / "replayed.hcpe")
        direct, hcpe3 = plan_sources(sorted(folder.iterdir()))
        cache = tmp_path / "fuzz.cache"
        build_hcpe3_cache(hcpe3, cache)
        corpus = open_corpus(direct, [cache], FEATURES2_NUM)
        batch = corpus.gather(np.arange(len(corpus)))  # every surviving position through cshogi
    assert len(batch.result) == len(corpus) > 1000
    assert all((folder / name).is_file() for name in warned_names(caught))
