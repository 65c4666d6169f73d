"""Training-record formats: hcpe, hcpe3, the hcpe3 cache and the seed `.data` format.

Self-play, the converters and the trainer must agree byte for byte with dlshogi's files, so every
format is one little-endian packed numpy dtype here, with readers that refuse foreign files with a
one-line UserError (never a crash inside cshogi) and tolerate a truncated tail left by an
interrupted writer (warning, then every whole record).
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import cshogi
import numpy as np
from tqdm import tqdm

from engine.core.score import EVAL_COEF, eval_to_value  # noqa: F401 - part of this module's API
from engine.errors import UserError
from engine.fileio import atomic_write

PathLike = str | os.PathLike
T = TypeVar("T")

MOVE_LABELS = 2187
MAX_CANDIDATES = 593  # the most legal moves any shogi position has

# hcpe3 header `result`: bits 0-1 GameResult (same values as cshogi.DRAW/BLACK_WIN/WHITE_WIN), then reasons.
RESULT_DRAW = 0
RESULT_BLACK_WIN = 1
RESULT_WHITE_WIN = 2
RESULT_MASK = 0x3
RESULT_SENNICHITE = 0x4
RESULT_NYUGYOKU = 0x8
RESULT_MAX_MOVES = 0x10

# hcpe3 header `opponent`: where the game came from.
OPPONENT_SELFPLAY = 0
OPPONENT_USI_BLACK = 1
OPPONENT_USI_WHITE = 2

HCP = np.dtype(cshogi.HuffmanCodedPos)
HCPE = np.dtype(cshogi.HuffmanCodedPosAndEval)
HCPE3_HEADER = np.dtype([("hcp", "u1", 32), ("moveNum", "<u2"), ("result", "u1"), ("opponent", "u1")])
MOVE_INFO = np.dtype([("selectedMove16", "<u2"), ("eval", "<i2"), ("candidateNum", "<u2")])
MOVE_VISITS = np.dtype([("move16", "<u2"), ("visitNum", "<u2")])
DATA = np.dtype([("hcp", "u1", 32), ("policy", "<f4", MOVE_LABELS), ("result", "u1")])
CACHE_BODY = np.dtype([("hcp", "u1", 32), ("value", "<f4"), ("result", "<f4"), ("count", "<i4")])
# dlshogi's `struct Hcpe3CacheCandidate {u16 move16; float prob;}` is not packed: the compiler pads it to 8
# bytes, so its cache files carry 2 padding bytes per candidate. We match the real files, not a packed 6.
CACHE_CANDIDATE = np.dtype(
    {"names": ["move16", "prob"], "formats": ["<u2", "<f4"], "offsets": [0, 4], "itemsize": 8}
)

assert (HCP.itemsize, HCPE.itemsize, HCPE3_HEADER.itemsize) == (32, 38, 36)
assert (MOVE_INFO.itemsize, MOVE_VISITS.itemsize, DATA.itemsize) == (6, 4, 8781)
assert (CACHE_BODY.itemsize, CACHE_CANDIDATE.itemsize) == (44, 8)

EXTENSIONS = {".hcpe": "hcpe", ".hcpe3": "hcpe3", ".cache": "cache", ".hcpe3cache": "cache", ".data": "data"}

# ---------------------------------------------------------------------------------------------------
# HuffmanCodedPos validation. cshogi's Board.set_hcp accepts many garbage codes and can then crash the
# interpreter, so a file's positions are checked here first. Apery's layout, read LSB first: 1 bit side
# to move, 7 bits per king square, the other 79 squares board-coded, then hands until bit 256.

_PIECE_COUNTS = {"P": 18, "L": 4, "N": 4, "S": 4, "G": 4, "B": 2, "R": 2}
# (code, bits) -> base piece type; the promoted and White codes of each piece map to the same letter.
_BOARD_CODES = {
    (0b0, 1): "",
    **{(c, 4): "P" for c in (0b1, 0b1001, 0b101, 0b1101)},
    **{(c, 6): "L" for c in (0b11, 0b100011, 0b10011, 0b110011)},
    **{(c, 6): "N" for c in (0b111, 0b100111, 0b10111, 0b110111)},
    **{(c, 6): "S" for c in (0b1011, 0b101011, 0b11011, 0b111011)},
    **{(c, 6): "G" for c in (0b1111, 0b101111)},
    **{(c, 8): "B" for c in (0b11111, 0b10011111, 0b1011111, 0b11011111)},
    **{(c, 8): "R" for c in (0b111111, 0b10111111, 0b1111111, 0b11111111)},
}
_HAND_CODES = {
    **{(c, 3): "P" for c in (0b0, 0b100)},
    **{(c, 5): "L" for c in (0b1, 0b10001)},
    **{(c, 5): "N" for c in (0b11, 0b10011)},
    **{(c, 5): "S" for c in (0b101, 0b10101)},
    **{(c, 5): "G" for c in (0b111, 0b10111)},
    **{(c, 7): "B" for c in (0b11111, 0b1011111)},
    **{(c, 7): "R" for c in (0b111111, 0b1111111)},
}


def _read_code(bits: int, pos: int, table: dict[tuple[int, int], str]) -> tuple[str | None, int]:
    for n in range(1, 9):
        piece = table.get(((bits >> pos) & ((1 << n) - 1), n))
        if piece is not None:
            return piece, pos + n
    return None, pos


def is_valid_hcp(hcp: np.ndarray | bytes) -> bool:
    """True if `hcp` decodes to exactly 256 bits holding two kings and all 38 other pieces."""
    raw = bytes(hcp)
    if len(raw) != 32:
        return False
    bits = int.from_bytes(raw, "little")
    kings = ((bits >> 1) & 0x7F, (bits >> 8) & 0x7F)
    if kings[0] >= 81 or kings[1] >= 81 or kings[0] == kings[1]:
        return False
    counts = dict.fromkeys(_PIECE_COUNTS, 0)
    pos = 15
    for sq in range(81):
        if sq in kings:
            continue
        piece, pos = _read_code(bits, pos, _BOARD_CODES)
        if piece is None or pos > 256:
            return False
        if piece:
            counts[piece] += 1
    while pos < 256:
        piece, pos = _read_code(bits, pos, _HAND_CODES)
        if piece is None or pos > 256:
            return False
        counts[piece] += 1
    return counts == _PIECE_COUNTS


_PIECE_INDEX = {"": 0, **{p: i + 1 for i, p in enumerate(_PIECE_COUNTS)}}
# Piece counts packed 7 bits a piece type (index 0, empty squares, included): one add a step.
_EXPECTED_PACKED = sum(n << (7 * _PIECE_INDEX[p]) for p, n in _PIECE_COUNTS.items())


def _code_table(table: dict[tuple[int, int], str]) -> tuple[np.ndarray, np.ndarray]:
    """(code length, packed count of its piece) for every value of the next 8 bits; length 0: no
    code starts there."""
    lengths, counts = np.zeros(256, np.int64), np.zeros(256, np.int64)
    for v in range(256):
        piece, n = _read_code(v, 0, table)
        if piece is not None:
            lengths[v], counts[v] = n, 1 << (7 * _PIECE_INDEX[piece])
    return lengths, counts


_BOARD_TABLE = _code_table(_BOARD_CODES)
_HAND_TABLE = _code_table(_HAND_CODES)


def valid_hcps(hcps: np.ndarray) -> np.ndarray:
    """`is_valid_hcp` of every row of uint8 [N, 32] at once: the codes of all rows are decoded in step
    (a board square or a hand piece a step), so whole files can be checked before cshogi reads them
    (one flipped bit can make cshogi crash the interpreter)."""
    raw = np.ascontiguousarray(hcps).view(np.uint8).reshape(-1, 32).astype(np.int64)
    n = len(raw)
    padded = np.zeros((n, 34), np.int64)  # zero bytes past the end: reads there see 0 bits, as ints do
    padded[:, :32] = raw
    pairs = (padded[:, :33] | padded[:, 1:] << 8).reshape(-1)  # bytes i and i+1 of each row
    base = np.arange(n) * 33
    kings = (raw[:, 0] >> 1, raw[:, 1] & 0x7F)  # bit 0 is the side to move, then 7 bits a king
    ok = (kings[0] < 81) & (kings[1] < 81) & (kings[0] != kings[1])
    pos = np.full(n, 15, np.int64)
    packed = np.zeros(n, np.int64)

    def step(table: tuple[np.ndarray, np.ndarray], active: np.ndarray) -> None:
        nonlocal ok, pos, packed
        bits = pairs[base + np.minimum(pos >> 3, 32)] >> (pos & 7) & 0xFF
        length = table[0][bits] * active
        ok &= ~active | (length > 0)
        pos += length
        packed += table[1][bits] * active
        ok &= pos <= 256

    for sq in range(81):
        step(_BOARD_TABLE, ok & (kings[0] != sq) & (kings[1] != sq))
    for _ in range(sum(_PIECE_COUNTS.values())):
        active = ok & (pos < 256)
        if not active.any():
            break
        step(_HAND_TABLE, active)
    return ok & (pos == 256) & (packed >> 7 == _EXPECTED_PACKED >> 7)


def hcp_turn(hcp: np.ndarray) -> int:
    """Side to move (cshogi.BLACK/WHITE) of an hcp: its first bit."""
    return int(hcp[0]) & 1


def result_for_turn(result: int, turn: int) -> float:
    """Game result from the side to move's view: 1 won, 0 lost, 0.5 draw."""
    game = result & RESULT_MASK
    if game == RESULT_DRAW:
        return 0.5
    return 1.0 if (game == RESULT_BLACK_WIN) == (turn == cshogi.BLACK) else 0.0


# ---------------------------------------------------------------------------------------------------
# Shared file checks.


def _existing_file(path: PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file")
    if not p.is_file():
        raise UserError(f"{p}: not a regular file")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: file is empty")
    return p


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


def _warn_truncated(path: Path, offset: int, what: str) -> None:
    warnings.warn(
        f"{path}: truncated {what} at byte offset {offset}; reading the whole records before it",
        stacklevel=3,
    )


def _sample(n: int, k: int = 16) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, k)).astype(np.int64))


_CHECK_CHUNK = 16384
_CHECKED: set[tuple[str, int, int]] = set()  # (file, size, mtime) whose every position decodes


def _check_positions(path: Path, n: int, hcps: Callable[[int, int], np.ndarray], kind: str) -> None:
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


# ---------------------------------------------------------------------------------------------------
# Fixed-size formats: hcpe and .data.


def _read_fixed(path: PathLike, dtype: np.dtype, kind: str, result_field: str) -> np.memmap:
    p = _existing_file(path)
    size = p.stat().st_size
    n, partial = divmod(size, dtype.itemsize)
    if n == 0:
        raise UserError(f"{p}: not a {kind} file ({size} bytes, one record is {dtype.itemsize})")
    records = np.memmap(p, dtype=dtype, mode="r", shape=(n,))
    _check_positions(p, n, lambda a, b: records["hcp"][a:b], kind)
    results = records[_sample(n)][result_field]
    if np.any((results < 0) | (results > 2)):
        raise UserError(f"{p}: not a {kind} file (game result outside 0..2)")
    if partial:
        _warn_truncated(p, n * dtype.itemsize, f"final {kind} record")
    return records


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


def read_hcpe(path: PathLike) -> np.memmap:
    """Memory-map an hcpe file read-only (dtype HCPE)."""
    return _read_fixed(path, HCPE, "hcpe", "gameResult")


def write_hcpe(path: PathLike, records: np.ndarray) -> None:
    """Write hcpe records atomically."""
    _write_fixed(path, records, HCPE)


def append_hcpe(path: PathLike, records: np.ndarray) -> None:
    """Append hcpe records to `path` (created if missing)."""
    _append_fixed(path, records, HCPE)


def read_data(path: PathLike) -> np.memmap:
    """Memory-map a seed .data file read-only (dtype DATA)."""
    return _read_fixed(path, DATA, "data", "result")


def write_data(path: PathLike, records: np.ndarray) -> None:
    """Write .data records atomically."""
    _write_fixed(path, records, DATA)


def append_data(path: PathLike, records: np.ndarray) -> None:
    """Append .data records to `path` (created if missing)."""
    _append_fixed(path, records, DATA)


# ---------------------------------------------------------------------------------------------------
# hcpe3: one game after another, header + per move (MoveInfo + candidates).


@dataclass
class Hcpe3Game:
    """One hcpe3 game: start position, result bits, origin, and per move its info and candidates."""

    hcp: np.ndarray  # 32 u1, start position
    result: int  # GameResult | reason bits
    opponent: int
    moves: np.ndarray  # MOVE_INFO[moveNum]
    candidates: list[np.ndarray]  # one MOVE_VISITS array per move


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
            end = _whole_games_end(self.path)
            if end < self.path.stat().st_size:
                warnings.warn(f"{self.path}: dropping a partial game at byte offset {end}", stacklevel=2)
                os.truncate(self.path, end)
        self._f: IO[bytes] | None = None
        self.games = 0

    def write(self, game: Hcpe3Game) -> None:
        data = encode_hcpe3_game(game)
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
            _warn_truncated(path, off, "final hcpe3 game")
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
                _warn_truncated(path, off, "final hcpe3 game")
                return
            moves[i] = np.frombuffer(mm, MOVE_INFO, 1, pos)[0]
            pos += MOVE_INFO.itemsize
            k = int(moves[i]["candidateNum"])
            if k > MAX_CANDIDATES:
                _hcpe3_damage(path, off, f"{k} candidates at byte offset {pos - 6}", strict)
                return
            if pos + k * MOVE_VISITS.itemsize > size:
                _warn_truncated(path, off, "final hcpe3 game")
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
    p = _existing_file(path)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        yield from _walk_hcpe3(p, mm, strict)


def _whole_games_end(path: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return max((end for _, end, _ in _games_with_offsets(path, strict=True)), default=0)


def iter_hcpe3_games(path: PathLike) -> Iterator[Hcpe3Game]:
    """Stream the games of an hcpe3 file (memory-mapped; one game in Python objects at a time)."""
    for _, _, game in _games_with_offsets(path):
        yield game


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


# ---------------------------------------------------------------------------------------------------
# hcpe3 cache: u64 num, u64 offset[num], then per position CACHE_BODY + CACHE_CANDIDATE[k].


@dataclass
class CacheStats:
    """What build_hcpe3_cache did."""

    positions: int = 0  # positions read from the inputs
    entries: int = 0  # entries written
    no_candidates: int = 0  # positions whose move carried no policy target
    merged: int = 0  # duplicates folded into an earlier entry (average=True)


def visits_to_probs(visits: np.ndarray, temperature: float) -> np.ndarray:
    """Policy target from visit counts: T=1 proportional, T=0 one-hot on the most visited, else v^(1/T)."""
    v = np.asarray(visits, np.float64)
    if temperature == 0:
        probs = np.zeros_like(v)
        probs[np.argmax(v)] = 1.0
        return probs.astype(np.float32)
    if temperature != 1:
        v = (v / v.max()) ** (1.0 / temperature)
    return (v / v.sum()).astype(np.float32)


def _encode_cache_entry(
    hcp: bytes, value: float, result: float, count: int, move16s: np.ndarray, probs: np.ndarray
) -> bytes:
    cands = np.zeros(len(move16s), CACHE_CANDIDATE)  # zeroed padding: reproducible bytes
    cands["move16"] = move16s
    cands["prob"] = probs
    return struct.pack("<32sffi", hcp, value, result, count) + cands.tobytes()


def _write_cache(out_path: PathLike, entries: Iterable[bytes]) -> int:
    """Spool the entries to a temp file to learn the offsets, then write header + entries atomically."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    sizes: list[int] = []
    with tempfile.TemporaryFile(dir=out.parent) as spool:
        for body in entries:
            spool.write(body)
            sizes.append(len(body))
        n = len(sizes)
        offsets = 8 + 8 * n + np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64)]) if n else []
        spool.seek(0)
        with atomic_write(out, "wb") as f:
            f.write(struct.pack("<Q", n))
            f.write(np.asarray(offsets, "<u8").tobytes())
            shutil.copyfileobj(spool, f, 1 << 20)
    return n


def _as_paths(inputs: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(inputs, str | os.PathLike):
        return [Path(inputs)]
    return [Path(p) for p in inputs]


def build_hcpe3_cache(
    inputs: PathLike | Iterable[PathLike],
    out_path: PathLike,
    average: bool = False,
    temperature: float = 1.0,
    skip_no_candidates: bool = True,
    progress: bool = False,
) -> CacheStats:
    """Replay hcpe3 files into dlshogi's random-access cache (value = winrate of eval, result and policy
    from the side to move). Moves with no candidates carry no policy target: skipped, as dlshogi does,
    or kept with an empty policy. average=True merges duplicate positions (sums + count)."""
    if temperature < 0:
        raise UserError(f"temperature must be >= 0, got {temperature}")
    paths = usable_files(_as_paths(inputs), check_hcpe3, "hcpe3")
    stats = CacheStats()

    def targets() -> Iterator[tuple[bytes, float, float, np.ndarray, np.ndarray]]:
        bar = tqdm(desc="positions", unit="pos", disable=not progress)
        with bar:
            for p in paths:
                for pos in iter_hcpe3_positions(p):
                    bar.update()
                    stats.positions += 1
                    visits = pos.candidates["visitNum"]
                    if len(visits) == 0 or not visits.any():
                        stats.no_candidates += 1
                        if skip_no_candidates:
                            continue
                        move16s, probs = np.empty(0, np.uint16), np.empty(0, np.float32)
                    else:
                        move16s, probs = pos.candidates["move16"], visits_to_probs(visits, temperature)
                    value = float(eval_to_value(pos.eval))
                    result = result_for_turn(pos.result, hcp_turn(pos.hcp))
                    yield pos.hcp.tobytes(), value, result, move16s, probs

    def plain() -> Iterator[bytes]:
        for hcp, value, result, move16s, probs in targets():
            yield _encode_cache_entry(hcp, value, result, 1, move16s, probs)

    def averaged() -> Iterator[bytes]:
        merged: dict[bytes, list] = {}
        for hcp, value, result, move16s, probs in targets():
            entry = merged.get(hcp)
            if entry is None:
                merged[hcp] = [value, result, 1, dict(zip(move16s.tolist(), probs.tolist(), strict=True))]
                continue
            stats.merged += 1
            entry[0] += value
            entry[1] += result
            entry[2] += 1
            policy = entry[3]
            for m, pr in zip(move16s.tolist(), probs.tolist(), strict=True):
                policy[m] = policy.get(m, 0.0) + pr
        for hcp, (value, result, count, policy) in merged.items():
            move16s = np.fromiter(policy.keys(), np.uint16, len(policy))
            probs = np.fromiter(policy.values(), np.float32, len(policy))
            yield _encode_cache_entry(hcp, value, result, count, move16s, probs)

    stats.entries = _write_cache(out_path, averaged() if average else plain())
    return stats


class Hcpe3Cache:
    """Random access to an hcpe3 cache (memory-mapped); values are returned already divided by count."""

    def __init__(self, path: PathLike):
        p = _existing_file(path)
        self.path = p
        size = p.stat().st_size
        mm = np.memmap(p, dtype=np.uint8, mode="r")
        num = int(mm[:8].view("<u8")[0]) if size >= 8 else 0
        header_end = 8 + 8 * num
        if size < 8 or header_end > size:
            raise UserError(f"{p}: not an hcpe3 cache (its header does not fit in {size} bytes)")
        starts = mm[8:header_end].view("<u8").astype(np.int64)
        steps = np.diff(starts)
        body = CACHE_BODY.itemsize
        if num and (
            starts[0] != header_end
            or np.any(steps < body)
            or np.any((steps - body) % CACHE_CANDIDATE.itemsize)
        ):
            raise UserError(f"{p}: not an hcpe3 cache (entry offsets out of range)")
        if not num and size != 8:
            raise UserError(f"{p}: not an hcpe3 cache (no entries but {size - 8} bytes after the header)")
        # Entries before the first one that runs past the end of the file are whole; the last entry's
        # length comes from the file size, so it is whole only if its candidates fill that exactly.
        whole = int(np.searchsorted(starts[1:], size, side="right"))
        tail = size - int(starts[-1]) - body if num else -1
        if whole == num - 1 and tail >= 0 and tail % CACHE_CANDIDATE.itemsize == 0:
            whole = num
        if whole < num:
            _warn_truncated(p, int(starts[whole]), "final cache entry")
        self._mm = mm
        self._starts = starts[:whole]
        self._ends = np.append(starts[1:], size)[:whole]
        if whole:
            if np.any(self._bodies(_sample(whole))["count"] < 1):
                raise UserError(f"{p}: not an hcpe3 cache (an entry has count < 1)")
            _check_positions(p, whole, lambda a, b: self._bodies(np.arange(a, b))["hcp"], "hcpe3 cache")

    def __len__(self) -> int:
        return len(self._starts)

    def __reduce__(self) -> tuple:
        return (Hcpe3Cache, (self.path,))  # reopen in DataLoader workers instead of pickling the map

    def _bodies(self, idx: np.ndarray) -> np.ndarray:
        raw = self._mm[self._starts[idx][:, None] + np.arange(CACHE_BODY.itemsize)]
        return np.ascontiguousarray(raw).view(CACHE_BODY).reshape(-1)

    def entry(self, i: int) -> tuple[np.ndarray, float, float, np.ndarray, np.ndarray]:
        """(hcp, value, result, move16s, probs) of entry i."""
        hcps, value, result, cands = self.gather(np.array([i]))
        return hcps[0], float(value[0]), float(result[0]), cands[0][0], cands[0][1]

    def gather(
        self, indices: np.ndarray | Iterable[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """Batched read: hcps [B,32] u1, value [B] f32, result [B] f32, per entry (move16s, probs)."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"cache index out of range (size {n})")
        idx %= max(n, 1)
        bodies = self._bodies(idx)
        count = bodies["count"].astype(np.float32)
        value = bodies["value"] / count
        result = bodies["result"] / count
        starts = self._starts[idx] + CACHE_BODY.itemsize
        lengths = (self._ends[idx] - starts) // CACHE_CANDIDATE.itemsize
        nbytes = lengths * CACHE_CANDIDATE.itemsize
        first = np.cumsum(nbytes) - nbytes
        byte_idx = np.repeat(starts - first, nbytes) + np.arange(int(nbytes.sum()))
        cands = np.ascontiguousarray(self._mm[byte_idx]).view(CACHE_CANDIDATE)
        probs = cands["prob"] / np.repeat(count, lengths)
        splits = np.cumsum(lengths)[:-1]
        pairs = list(zip(np.split(cands["move16"], splits), np.split(probs, splits), strict=True))
        return bodies["hcp"].copy(), value, result, pairs


# ---------------------------------------------------------------------------------------------------
# Format detection.


def _sniff(path: Path) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in ("cache", "data", "hcpe", "hcpe3"):
            try:
                _VALIDATORS[fmt](path)
            except UserError:
                continue
            return fmt
    return None


def check_hcpe3(path: Path) -> None:
    """The first game must parse (damage later on is reported, once, when the games are read)."""
    games = _games_with_offsets(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            next(games, None)
    finally:
        games.close()


_VALIDATORS = {
    "hcpe": read_hcpe,
    "data": read_data,
    "cache": Hcpe3Cache,
    "hcpe3": check_hcpe3,
}


def detect_format(path: PathLike) -> str:
    """'hcpe' | 'hcpe3' | 'cache' | 'data': by extension, else by content; the content is validated."""
    p = _existing_file(path)
    fmt = EXTENSIONS.get(p.suffix.lower())
    if fmt is None:
        fmt = _sniff(p)
        if fmt is None:
            raise UserError(f"{p}: unknown record format (not hcpe, hcpe3, hcpe3 cache or .data)")
        return fmt
    _VALIDATORS[fmt](p)
    return fmt
