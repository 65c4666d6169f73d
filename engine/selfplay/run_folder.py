"""A cluster run's folder, written by its driver alone: whole games appended to one new hcpe3 file per
run of the driver (or per run and model, for a window by model age), and beside each a manifest with one
JSON line per game (its id, the node and the model that played it), so that a rerun knows which game
ids are done and plays only the others.

The manifest line is written before its game. A driver killed between the two leaves a line too many;
a rerun trusts only as many lines as the file holds whole games, cuts a torn last game off and drops the
extra lines (`repair`), so every id it counts is a game on disk, once. Files without a manifest (plain
`bin/selfplay` runs into the same folder) count as games without ids.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from engine.fileio import atomic_write_text
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import Hcpe3Writer
from engine.selfplay.writer import output_path

MANIFEST_SUFFIX = ".games.jsonl"


def manifest_path(hcpe3: Path) -> Path:
    return hcpe3.with_name(hcpe3.stem + MANIFEST_SUFFIX)


def read_manifest(path: Path) -> list[dict]:
    """The manifest's whole lines (a torn last line is no line)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                break
            if not isinstance(row, dict) or not isinstance(row.get("id"), int):
                break
            rows.append(row)
    return rows


@dataclass
class Done:
    """What a folder already holds."""

    games: int = 0  # whole games in all its hcpe3 files
    ids: set[int] = field(default_factory=set)  # the ids of those with a manifest line
    rows: list[dict] = field(default_factory=list)  # their manifest lines


def repair(hcpe3: Path) -> list[dict]:
    """Cut a torn last game off a driver's file and its manifest's lines down to its whole games; the
    lines that remain."""
    Hcpe3Writer(hcpe3).close()  # truncates a partial last game (with a warning)
    rows = read_manifest(manifest_path(hcpe3))
    games = sum(1 for _ in iter_hcpe3_games(hcpe3)) if hcpe3.stat().st_size else 0
    if len(rows) > games:
        rows = rows[:games]
        atomic_write_text(manifest_path(hcpe3), "".join(json.dumps(r) + "\n" for r in rows))
    return rows


def read_done(folder: Path) -> Done:
    """Count (and repair) what is in `folder`."""
    done = Done()
    for f in sorted(Path(folder).glob("*.hcpe3")):
        if not f.stat().st_size:
            continue
        if manifest_path(f).is_file():
            rows = repair(f)
            done.rows += rows
            done.ids.update(r["id"] for r in rows)
        done.games += sum(1 for _ in iter_hcpe3_games(f))
    return done


@dataclass
class _File:
    path: Path
    hcpe3: Hcpe3Writer
    manifest: IO[str]


class RunWriter:
    """The driver's writer of one folder: a new hcpe3 file (created with its first game) and its
    manifest. With `by_model`, each model's games get a file of their own, so that a training window
    can choose games by the model that played them, file by file. Each game goes in whole: its
    manifest line, then its bytes, both flushed."""

    def __init__(self, folder: Path, tag: str = "-ray", by_model: bool = False) -> None:
        self.folder = Path(folder)
        self.tag = tag
        self.by_model = by_model
        self.games = 0
        self.paths: list[Path] = []  # every file it created
        self._files: dict[str, _File] = {}  # the open ones, by model

    def _file(self, model: str) -> _File:
        key = model if self.by_model else ""
        if key not in self._files:
            self.folder.mkdir(parents=True, exist_ok=True)
            tag = self.tag + (f"-{re.sub(r'[^A-Za-z0-9_.]+', '-', key)}" if key else "")
            path = output_path(self.folder, "hcpe3", tag)
            self.paths.append(path)
            self._files[key] = _File(path, Hcpe3Writer(path), open(manifest_path(path), "a"))  # noqa: SIM115
        return self._files[key]

    def write(self, game_id: int, data: bytes, meta: dict) -> None:
        f = self._file(str(meta.get("model", "")))
        f.manifest.write(json.dumps({"id": game_id, **meta}) + "\n")
        f.manifest.flush()
        f.hcpe3.write_encoded(data)
        self.games += 1

    def close(self) -> None:
        for f in self._files.values():
            f.hcpe3.close()
            f.manifest.flush()
            os.fsync(f.manifest.fileno())
            f.manifest.close()
        self._files = {}
