"""Writing training records: hcpe and .data atomically or in whole appended records, hcpe3 a game a write."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import numpy as np

from engine.fileio import atomic_write
from engine.records.formats import DATA, HCPE, HCPE3_HEADER, MOVE_INFO, MOVE_VISITS, Hcpe3Game, PathLike
from engine.records.hcpe3_games import whole_games_end


def _as_records(records: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.ascontiguousarray(records, dtype=dtype).reshape(-1)


def _write_fixed(path: PathLike, records: np.ndarray, dtype: np.dtype) -> None:
    arr = _as_records(records, dtype)
    with atomic_write(path, "wb") as f:
        f.write(arr.view(np.uint8))


def _append_fixed(path: PathLike, records: np.ndarray, dtype: np.dtype) -> None:
    """Append whole records; a partial tail left by a crash is cut off first so records stay aligned."""
    arr = _as_records(records, dtype)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "ab") as f:
        partial = f.tell() % dtype.itemsize
        if partial:
            cut = f.tell() - partial
            warnings.warn(f"{p}: dropping a partial record at byte offset {cut}", stacklevel=3)
            f.truncate(cut)
            f.seek(cut)
        f.write(arr.view(np.uint8))
        f.flush()


def write_hcpe(path: PathLike, records: np.ndarray) -> None:
    """Write hcpe records atomically."""
    _write_fixed(path, records, HCPE)


def append_hcpe(path: PathLike, records: np.ndarray) -> None:
    """Append hcpe records to `path` (created if missing)."""
    _append_fixed(path, records, HCPE)


def write_data(path: PathLike, records: np.ndarray) -> None:
    """Write .data records atomically."""
    _write_fixed(path, records, DATA)


def append_data(path: PathLike, records: np.ndarray) -> None:
    """Append .data records to `path` (created if missing)."""
    _append_fixed(path, records, DATA)


def encode_hcpe3_game(game: Hcpe3Game) -> bytes:
    """The bytes of one game; candidateNum is taken from the candidate arrays, so it always matches."""
    n = len(game.moves)
    if len(game.candidates) != n:
        raise ValueError(f"{n} moves but {len(game.candidates)} candidate arrays")
    if n > 0xFFFF:
        raise ValueError(f"{n} moves do not fit moveNum (u16)")
    header = np.zeros(1, HCPE3_HEADER)
    header["hcp"] = np.asarray(game.hcp, np.uint8).reshape(32)
    header["moveNum"] = n
    header["result"] = game.result
    header["opponent"] = game.opponent
    moves = np.array(game.moves, dtype=MOVE_INFO).reshape(n)
    cands = [np.ascontiguousarray(c, dtype=MOVE_VISITS).reshape(-1) for c in game.candidates]
    moves["candidateNum"] = [len(c) for c in cands]
    rows = moves.view(np.uint8).reshape(n, MOVE_INFO.itemsize)
    parts = [header.tobytes()]
    for row, c in zip(rows, cands, strict=True):
        parts.append(row.tobytes())
        parts.append(c.tobytes())
    return b"".join(parts)


def _write_all(f: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[f.write(view) :]


def write_hcpe3_games(f_or_path: PathLike | IO[bytes], games: Iterable[Hcpe3Game]) -> int:
    """Write games to an open binary file, or atomically to a path; returns the number written."""
    if isinstance(f_or_path, str | os.PathLike):
        with atomic_write(f_or_path, "wb") as f:
            return write_hcpe3_games(f, games)
    count = 0
    for game in games:
        f_or_path.write(encode_hcpe3_game(game))
        count += 1
    return count


class Hcpe3Writer:
    """Appends games to an hcpe3 file with one unbuffered write per game, so a crash mid-run leaves at
    most a partial last game, which readers skip with a warning and this writer cuts off on reopening."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size:
            end = whole_games_end(self.path)
            if end < self.path.stat().st_size:
                warnings.warn(f"{self.path}: dropping a partial game at byte offset {end}", stacklevel=2)
                os.truncate(self.path, end)
        self._f: IO[bytes] | None = None
        self.games = 0

    def write(self, game: Hcpe3Game) -> None:
        self.write_encoded(encode_hcpe3_game(game))

    def write_encoded(self, data: bytes) -> None:
        """Append one game already encoded by `encode_hcpe3_game` (a cluster's driver receives games so)."""
        if self._f is None:  # created with the first whole game: a run stopped before it leaves no empty file
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "ab", buffering=0)
        _write_all(self._f, data)
        self.games += 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> Hcpe3Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
