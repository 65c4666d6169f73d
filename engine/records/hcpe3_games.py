"""Reading an hcpe3 file game by game: whole games up to damage or a cut-off tail, which are reported.

Hcpe3Writer needs the walk to reopen a file after its last whole game; the training readers build on
it (train/data/readers.py). Foreign files get a one-line UserError, never a crash inside cshogi.
"""

from __future__ import annotations

import mmap
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from engine.core.moves import MAX_LEGAL_MOVES
from engine.core.rules import RESULT_MASK
from engine.errors import UserError
from engine.records.formats import HCPE3_HEADER, MOVE_INFO, MOVE_VISITS, Hcpe3Game, PathLike
from engine.records.hcp_check import is_valid_hcp


def existing_file(path: PathLike) -> Path:
    """`path` as a Path; a UserError naming it if it is missing, not a file, or empty."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file")
    if not p.is_file():
        raise UserError(f"{p}: not a regular file")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: file is empty")
    return p


def warn_truncated(path: Path, offset: int, what: str) -> None:
    """Warn (at the reader's caller) that a record was cut off; the whole ones before it are read."""
    warnings.warn(
        f"{path}: truncated {what} at byte offset {offset}; reading the whole records before it",
        stacklevel=3,
    )


def _valid_header(header: np.ndarray) -> bool:
    result = int(header["result"])
    return (result & RESULT_MASK) != 3 and result < 0x20 and is_valid_hcp(header["hcp"])


def _walk_hcpe3(path: Path, mm: mmap.mmap, strict: bool) -> Iterator[tuple[int, int, Hcpe3Game]]:
    """Yield (start, end, game) for each whole game; warn about a partial last game. Damage after the
    first game (a bad header or candidate count) ends the file with a warning (a UserError if strict);
    in the first game it means the file is not hcpe3."""
    size = len(mm)
    off = 0
    while off < size:
        if size - off < HCPE3_HEADER.itemsize:
            if off == 0:  # not even one header: nothing says this is hcpe3 (a text file, say)
                _hcpe3_damage(path, off, f"{size} bytes, shorter than a game header", strict)
            warn_truncated(path, off, "final hcpe3 game")
            return
        header = np.frombuffer(mm, HCPE3_HEADER, 1, off).copy()[0]  # no view may outlive the map
        if not _valid_header(header):
            _hcpe3_damage(path, off, f"no valid game header at byte offset {off}", strict)
            return
        n = int(header["moveNum"])
        moves = np.empty(n, MOVE_INFO)
        candidates = []
        pos = off + HCPE3_HEADER.itemsize
        for i in range(n):
            if pos + MOVE_INFO.itemsize > size:
                warn_truncated(path, off, "final hcpe3 game")
                return
            moves[i] = np.frombuffer(mm, MOVE_INFO, 1, pos)[0]
            pos += MOVE_INFO.itemsize
            k = int(moves[i]["candidateNum"])
            if k > MAX_LEGAL_MOVES:
                _hcpe3_damage(path, off, f"{k} candidates at byte offset {pos - 6}", strict)
                return
            if pos + k * MOVE_VISITS.itemsize > size:
                warn_truncated(path, off, "final hcpe3 game")
                return
            candidates.append(np.frombuffer(mm, MOVE_VISITS, k, pos).copy())
            pos += k * MOVE_VISITS.itemsize
        result, opponent = int(header["result"]), int(header["opponent"])
        yield off, pos, Hcpe3Game(header["hcp"], result, opponent, moves, candidates)
        off = pos


def _hcpe3_damage(path: Path, off: int, what: str, strict: bool) -> None:
    if off == 0:
        raise UserError(f"{path}: not an hcpe3 file ({what})")
    if strict:
        raise UserError(f"{path}: damaged ({what}); not appending to it")
    warnings.warn(f"{path}: damaged ({what}); reading the whole games before byte offset {off}", stacklevel=3)


def _games_with_offsets(path: PathLike, strict: bool = False) -> Iterator[tuple[int, int, Hcpe3Game]]:
    p = existing_file(path)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        yield from _walk_hcpe3(p, mm, strict)


def whole_games_end(path: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return max((end for _, end, _ in _games_with_offsets(path, strict=True)), default=0)


def iter_hcpe3_games(path: PathLike) -> Iterator[Hcpe3Game]:
    """Stream the games of an hcpe3 file (memory-mapped; one game in Python objects at a time)."""
    for _, _, game in _games_with_offsets(path):
        yield game


def check_hcpe3(path: Path) -> None:
    """The first game must parse (damage later on is reported, once, when the games are read)."""
    games = _games_with_offsets(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            next(games, None)
    finally:
        games.close()
