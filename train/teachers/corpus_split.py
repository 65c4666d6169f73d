"""Split a bin/corpus folder into training and test hcpe files by whole games.

Positions of one game are close relatives, so a test set cut at a random row would share games with
the training set and flatter the model; the split is made at a game boundary instead. The corpus
appends each finished game's rows to corpus.hcpe and then logs the game in games.jsonl, so the log's
order and position counts locate every game's rows; the last K kept games become the test set. A
corpus still being written can be split: rows appended after the log was read are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.errors import UserError
from engine.fileio import check_output_dir
from engine.records.writers import write_hcpe
from train.data.readers import read_hcpe
from train.teachers.corpus import DROPPED, LOG


def logged_games(corpus_dir: Path) -> list[dict]:
    """The whole lines of games.jsonl, in the order their rows were appended."""
    path = corpus_dir / LOG
    if not path.is_file():
        raise UserError(f"{corpus_dir}: not a corpus folder (no {LOG})")
    text = path.read_text()
    games = []
    for number, line in enumerate(text[: text.rfind("\n") + 1].splitlines(), 1):
        if not line.strip():
            continue
        try:
            games.append(json.loads(line))
        except ValueError:
            raise UserError(f"{path}:{number}: not a JSON line") from None
    return games


def split_corpus(corpus_dir: str | Path, test_games: int, out_dir: str | Path) -> dict[str, int]:
    """Write OUT/train.hcpe (all but the last `test_games` kept games) and OUT/test.hcpe (those)."""
    corpus_dir = Path(corpus_dir)
    games = [g for g in logged_games(corpus_dir) if g["reason"] not in DROPPED]
    if not 1 <= test_games < len(games):
        raise UserError(f"{corpus_dir}: --test-games must be 1..{len(games) - 1} (it has {len(games)} games)")
    rows = read_hcpe(corpus_dir / "corpus.hcpe")
    counts = [int(g["positions"]) for g in games]
    logged, cut = sum(counts), sum(counts[:-test_games])
    if len(rows) < logged:
        raise UserError(f"{corpus_dir / 'corpus.hcpe'}: {len(rows)} rows, but {LOG} logs {logged}")
    out = check_output_dir(out_dir, "-o")
    out.mkdir(parents=True, exist_ok=True)
    write_hcpe(out / "train.hcpe", rows[:cut])
    write_hcpe(out / "test.hcpe", rows[cut:logged])
    return {
        "train games": len(games) - test_games,
        "train positions": cut,
        "test games": test_games,
        "test positions": logged - cut,
    }
