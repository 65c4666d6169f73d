"""Reading training records: hcpe and .data memory-mapped and checked, hcpe3 games replayed into positions.

Readers refuse foreign files with a one-line UserError (never a crash inside cshogi) and tolerate a
truncated tail left by an interrupted writer (warning, then every whole record).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import cshogi
import numpy as np

from engine.errors import UserError
from engine.records.formats import DATA, HCPE, PathLike
from engine.records.hcp_check import valid_hcps
from engine.records.hcpe3_games import existing_file, iter_hcpe3_games, warn_truncated

T = TypeVar("T")


def usable_files(paths: Iterable[PathLike], check: Callable[[Path], T], kind: str) -> dict[Path, T]:
    """{file: check(file)} for the files `check` accepts; an empty, damaged or foreign one is skipped
    with a warning naming it, so one bad file never ends a run over a folder. When none is left, the
    error is that file's own (one file) or a UserError after the warnings. The check's own warnings (a
    cut-off tail) are left to the read that follows."""
    good: dict[Path, T] = {}
    errors: list[UserError] = []
    for p in map(Path, paths):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                good[p] = check(p)
        except UserError as e:
            errors.append(e)
    if not good and len(errors) == 1:
        raise errors[0]
    for e in errors:
        warnings.warn(f"{e}; skipped", stacklevel=2)
    if not good:
        raise UserError(f"no usable {kind} files ({len(errors)} skipped, see the warnings)")
    return good


def sample_indices(n: int, k: int = 16) -> np.ndarray:
    """Up to k indices spread evenly over 0..n-1, for spot checks of a whole file."""
    return np.unique(np.linspace(0, n - 1, min(n, k)).astype(np.int64))


_CHECK_CHUNK = 16384
_CHECKED: set[tuple[str, int, int]] = set()  # (file, size, mtime) whose every position decodes


def check_positions(path: Path, n: int, hcps: Callable[[int, int], np.ndarray], kind: str) -> None:
    """Every position (`hcps(a, b)`: those of records a..b-1) must decode: cshogi can crash the
    interpreter on a bad one, and one flipped bit makes one. Once per file version in a process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _CHECKED:
        return
    for a in range(0, n, _CHECK_CHUNK):
        bad = np.flatnonzero(~valid_hcps(hcps(a, min(a + _CHECK_CHUNK, n))))
        if len(bad):
            i = a + int(bad[0])
            raise UserError(
                f"{path}: not a {kind} file, or damaged (record {i} does not hold a valid position)"
            )
    _CHECKED.add(key)


def _read_fixed(path: PathLike, dtype: np.dtype, kind: str, result_field: str) -> np.memmap:
    p = existing_file(path)
    size = p.stat().st_size
    n, partial = divmod(size, dtype.itemsize)
    if n == 0:
        raise UserError(f"{p}: not a {kind} file ({size} bytes, one record is {dtype.itemsize})")
    records = np.memmap(p, dtype=dtype, mode="r", shape=(n,))
    check_positions(p, n, lambda a, b: records["hcp"][a:b], kind)
    results = records[sample_indices(n)][result_field]
    if np.any((results < 0) | (results > 2)):
        raise UserError(f"{p}: not a {kind} file (game result outside 0..2)")
    if partial:
        warn_truncated(p, n * dtype.itemsize, f"final {kind} record")
    return records


def read_hcpe(path: PathLike) -> np.memmap:
    """Memory-map an hcpe file read-only (dtype HCPE)."""
    return _read_fixed(path, HCPE, "hcpe", "gameResult")


def read_data(path: PathLike) -> np.memmap:
    """Memory-map a seed .data file read-only (dtype DATA)."""
    return _read_fixed(path, DATA, "data", "result")


@dataclass
class Hcpe3Position:
    """A replayed position of an hcpe3 game: the position before `move` and its targets."""

    hcp: np.ndarray  # 32 u1
    move: int  # full 32-bit cshogi move
    move16: int
    eval: int  # side to move's view
    candidates: np.ndarray  # MOVE_VISITS
    result: int  # game result incl. reason bits
    opponent: int
    game: int  # index of the game in its file
    ply: int  # index of the move within the game, from 0


def iter_hcpe3_positions(path: PathLike) -> Iterator[Hcpe3Position]:
    """Replay every game and yield the position before each move; an illegal move ends its game (warning)."""
    board = cshogi.Board()
    for g, game in enumerate(iter_hcpe3_games(path)):
        board.set_hcp(game.hcp)
        for ply, (info, cands) in enumerate(zip(game.moves, game.candidates, strict=True)):
            move16 = int(info["selectedMove16"])
            move = board.move_from_move16(move16)
            if (move & 0xFFFF) != move16 or not board.is_legal(move):
                warnings.warn(
                    f"{path}: game {g}, ply {ply}: illegal move {move16:#06x}; skipping the rest of the game",
                    stacklevel=2,
                )
                break
            hcp = np.empty(32, np.uint8)
            board.to_hcp(hcp)
            yield Hcpe3Position(
                hcp, move, move16, int(info["eval"]), cands, game.result, game.opponent, g, ply
            )
            board.push(move)
