"""Converters between record formats and record statistics: the library behind bin/convert.

CSA game records become hcpe (one record per position) or hcpe3 (one game at a time); hcpe3 becomes
hcpe or dlshogi's training cache; seed `.data` files (gumbel self-play) become hcpe3; an OSL opening
book (gpsshogi's `joseki.dat`) becomes a training cache. Every output is
written atomically, so an interrupted conversion never leaves a half-written file.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cshogi
import numpy as np
from cshogi.dlshogi import make_move_label
from tqdm import tqdm

from engine.core.rules import BLACK_WIN, DRAW, MAX_MOVES, NYUGYOKU, RESULT_MASK, SENNICHITE, WHITE_WIN
from engine.errors import UserError
from engine.fileio import atomic_write
from engine.records.formats import HCPE, MOVE_INFO, MOVE_VISITS, Hcpe3Game, PathLike
from engine.records.hcp_check import is_valid_hcp
from engine.records.hcpe3_games import check_hcpe3, iter_hcpe3_games
from engine.records.osl_book import iter_book_positions, read_osl_book
from engine.records.writers import write_hcpe3_games
from train.data.csa import CsaRecord, parse_csa
from train.data.detect import detect_format
from train.data.hcpe3_cache import Hcpe3Cache, build_hcpe3_cache, encode_cache_entry, write_cache
from train.data.readers import iter_hcpe3_positions, read_data, read_hcpe, usable_files

# CSA endings that add a reason bit to the result; the winner always comes from cshogi's parser.win.
REASON_BITS = {
    "%SENNICHITE": SENNICHITE,
    "%KACHI": NYUGYOKU,
    "%JISHOGI": MAX_MOVES,
    "%MAX_MOVES": MAX_MOVES,
}
REASON_NAMES = {"sennichite": SENNICHITE, "nyugyoku": NYUGYOKU, "max moves": MAX_MOVES}
# Games with these endings have no result to learn from.
UNFINISHED = {"%CHUDAN", "%ERROR"}


def expand_inputs(inputs: Iterable[PathLike], suffixes: tuple[str, ...], kind: str) -> list[Path]:
    """Files as given, folders searched recursively for `suffixes`; a missing path is a UserError."""
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in suffixes)
            if not found:
                raise UserError(f"{p}: no {kind} files ({', '.join(suffixes)}) in this folder")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    if not files:
        raise UserError("no input files given")
    return files


# ---------------------------------------------------------------------------------------------------
# CSA -> hcpe / hcpe3


@dataclass
class CsaGame:
    """A CSA game replayed up to its last legal move."""

    hcp: np.ndarray  # start position
    moves: list[int]
    evals: list[int]  # per move, side to move's view (CSA `'**` comments are Black's view)
    result: int  # GameResult | reason bits


def _read_csa(path: Path) -> list[CsaRecord]:
    """The games of a (possibly multi-game) CSA file."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a BOM, as Windows tools write it, is not part of the record
    except UnicodeDecodeError:
        text = raw.decode("cp932", errors="replace")  # floodgate's older records are Shift_JIS
    return parse_csa(text)


def _csa_game(
    index: int, record: CsaRecord, counts: Counter, min_rating: float | None, problems: list[str]
) -> CsaGame | None:
    """The game to keep from one record, or None; why a damaged game was skipped goes to `problems`."""
    if record.damage:
        problems.append(f"game {index} is damaged or not CSA ({record.damage}); skipped")
        counts["skipped: damaged"] += 1
        return None
    if not record.sfen:
        problems.append(f"game {index} has no start position; skipped")
        counts["skipped: no position"] += 1
        return None
    if not record.endgame:
        problems.append(f"game {index} has no end line (cut off?); skipped")
        counts["skipped: no end"] += 1
        return None
    if record.endgame in UNFINISHED:
        counts["skipped: unfinished"] += 1
        return None
    if min_rating is not None:
        if min(record.ratings) <= 0 or min(record.ratings) < min_rating:  # a missing rating reads as 0
            counts["skipped: rating"] += 1
            return None
    board = cshogi.Board(record.sfen)
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    if not is_valid_hcp(hcp):
        problems.append(f"game {index} starts from a position hcp cannot hold (handicap?); skipped")
        counts["skipped: start position"] += 1
        return None
    if record.illegal_ply is not None:
        problems.append(
            f"game {index}: illegal move at ply {record.illegal_ply}; keeping the moves before it"
        )
        counts["truncated: illegal move"] += 1
    evals: list[int] = []
    for move, score in zip(record.moves, record.scores, strict=True):
        score = max(-32767, min(32767, score))
        evals.append(score if board.turn == cshogi.BLACK else -score)
        board.push(move)
    return CsaGame(hcp, list(record.moves), evals, record.win | REASON_BITS.get(record.endgame, 0))


def iter_csa_games(
    inputs: Iterable[PathLike],
    min_rating: float | None = None,
    min_moves: int | None = None,
    counts: Counter | None = None,
) -> Iterator[CsaGame]:
    """Every game of the CSA inputs that passes the filters (both players rated >= min_rating; at least
    min_moves legal moves); `counts` collects what was kept and skipped, and why. The games of a damaged
    file that can be read are kept; one warning line names the file and what was skipped."""
    counts = Counter() if counts is None else counts
    for path in tqdm(expand_inputs(inputs, (".csa",), "CSA"), desc="CSA files", unit="file"):
        counts["files"] += 1
        problems: list[str] = []
        for index, record in enumerate(_read_csa(path)):
            game = _csa_game(index, record, counts, min_rating, problems)
            if game is None:
                continue
            if min_moves is not None and len(game.moves) < min_moves:
                counts["skipped: too short"] += 1
                continue
            counts["games"] += 1
            counts["positions"] += len(game.moves)
            yield game
        if problems:
            warnings.warn(f"{path}: {'; '.join(problems)}", stacklevel=2)


def _nothing_written(counts: Counter) -> UserError:
    detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return UserError(f"no games passed the filters, nothing written ({detail})")


def csa_to_hcpe(
    inputs: Iterable[PathLike], out: PathLike, min_rating: float | None = None, min_moves: int | None = None
) -> Counter:
    """One hcpe record per position: eval from the CSA comments (0 without), the played move, the winner."""
    counts: Counter = Counter()
    with atomic_write(out, "wb") as f:
        for game in iter_csa_games(inputs, min_rating, min_moves, counts):
            records = np.zeros(len(game.moves), HCPE)
            board = cshogi.Board()
            board.set_hcp(game.hcp)
            hcp = np.empty(32, np.uint8)
            for i, move in enumerate(game.moves):
                board.to_hcp(hcp)
                records["hcp"][i] = hcp
                board.push(move)
            records["eval"] = game.evals
            records["bestMove16"] = [cshogi.move16(m) for m in game.moves]
            records["gameResult"] = game.result & RESULT_MASK
            f.write(records.tobytes())
        if not counts["positions"]:
            raise _nothing_written(counts)
    return counts


def csa_to_hcpe3(
    inputs: Iterable[PathLike], out: PathLike, min_rating: float | None = None, min_moves: int | None = None
) -> Counter:
    """One hcpe3 game per CSA game. A record has no search visits, so each move gets a single candidate,
    the played move with visitNum 1: a one-hot policy target, as in dlshogi's csa_to_hcpe3. opponent is 0."""
    counts: Counter = Counter()

    def games() -> Iterator[Hcpe3Game]:
        for game in iter_csa_games(inputs, min_rating, min_moves, counts):
            move16s = [cshogi.move16(m) for m in game.moves]
            infos = np.zeros(len(move16s), MOVE_INFO)
            infos["selectedMove16"] = move16s
            infos["eval"] = game.evals
            cands = [np.array([(m, 1)], MOVE_VISITS) for m in move16s]
            yield Hcpe3Game(game.hcp, game.result, 0, infos, cands)

    with atomic_write(out, "wb") as f:
        if not write_hcpe3_games(f, games()):
            raise _nothing_written(counts)
    return counts


# ---------------------------------------------------------------------------------------------------
# hcpe3 -> hcpe / cache


def hcpe3_to_hcpe(inputs: Iterable[PathLike], out: PathLike) -> Counter:
    """Every position whose move carries a policy target (candidateNum > 0); the candidate distribution
    is lost and the played move becomes bestMove16."""
    counts: Counter = Counter()
    with atomic_write(out, "wb") as f:
        for path in usable_files(expand_inputs(inputs, (".hcpe3",), "hcpe3"), check_hcpe3, "hcpe3"):
            for game in _hcpe3_records(path, counts):
                f.write(game.tobytes())
        if not counts["positions"]:
            raise UserError(
                f"no positions with a policy target in the inputs, nothing written ({dict(counts)})"
            )
    return counts


def _hcpe3_records(path: Path, counts: Counter) -> Iterator[np.ndarray]:
    """hcpe records of one hcpe3 file, one array per game."""
    rows: list[tuple] = []
    game = 0
    for pos in tqdm(iter_hcpe3_positions(path), desc=path.name, unit="pos"):
        if pos.game != game and rows:
            yield np.array(rows, HCPE)
            rows.clear()
        game = pos.game
        if len(pos.candidates) == 0:
            counts["skipped: no candidates"] += 1
            continue
        rows.append((pos.hcp, pos.eval, pos.move16, pos.result & RESULT_MASK, 0))
        counts["positions"] += 1
    if rows:
        yield np.array(rows, HCPE)


def hcpe3_cache(
    inputs: Iterable[PathLike], out: PathLike, average: bool = False, temperature: float = 1.0
) -> Counter:
    """dlshogi's random-access training cache of hcpe3 files (see hcpe3_cache.build_hcpe3_cache)."""
    files = expand_inputs(inputs, (".hcpe3",), "hcpe3")
    stats = build_hcpe3_cache(files, out, average=average, temperature=temperature, progress=True)
    return Counter(vars(stats))


# ---------------------------------------------------------------------------------------------------
# OSL opening book -> hcpe3 cache


def book_win_rate(wins: int, losses: int, prior_games: float) -> float:
    """The side to move's winning rate in a book state's games, shrunk toward 0.5 by `prior_games`
    virtual games (half won): a state seen in 3 games is no 100 % win."""
    return (wins + prior_games / 2) / (wins + losses + prior_games)


def osl_book_to_cache(path: PathLike, out: PathLike, prior_games: float = 10.0) -> Counter:
    """dlshogi's training cache from an OSL opening book: one entry per state the book plays from,
    the policy its move weights, value and result the side to move's shrunk winning rate (the cache
    keeps both as fractions, which hcpe and hcpe3 cannot: their result is one game's)."""
    if prior_games < 0:
        raise UserError(f"--prior-games must be >= 0, got {prior_games}")
    book = read_osl_book(path)
    if not (book.moves["weight"] > 0).any():
        raise UserError(f"{path}: the book plays no move (every weight is 0); nothing to learn from")
    counts: Counter = Counter()

    def entries() -> Iterator[bytes]:
        for pos in tqdm(iter_book_positions(book), desc="book states", unit="state"):
            counts["states"] += 1
            played = [(usi, w) for usi, w, _ in pos.moves if w > 0]
            if not played:
                counts["no weighted move"] += 1
                continue
            board = pos.board
            black = board.turn == cshogi.BLACK
            wins, losses = (pos.black_wins, pos.white_wins) if black else (pos.white_wins, pos.black_wins)
            rate = book_win_rate(wins, losses, prior_games)
            move16s = np.array([cshogi.move16(board.move_from_usi(u)) for u, _ in played], np.uint16)
            weights = np.array([w for _, w in played], np.float64)
            hcp = np.empty(1, cshogi.HuffmanCodedPos)
            board.to_hcp(hcp)
            counts["positions"] += 1
            yield encode_cache_entry(
                hcp.tobytes(), rate, rate, 1, move16s, (weights / weights.sum()).astype(np.float32)
            )

    write_cache(out, entries())
    return counts


# ---------------------------------------------------------------------------------------------------
# seed .data -> hcpe3


def _policy_candidates(board: cshogi.Board, policy: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Legal moves, most probable first, and the policy over them as MOVE_VISITS (round(p * 65535))."""
    moves = list(board.legal_moves)
    labels = [make_move_label(m, board.turn) for m in moves]
    visits = np.clip(np.rint(policy[labels].astype(np.float64) * 65535), 0, 65535).astype(np.uint16)
    order = np.argsort(-visits, kind="stable")
    cands = np.zeros(len(moves), MOVE_VISITS)
    cands["move16"] = [cshogi.move16(moves[i]) for i in order]
    cands["visitNum"] = visits[order]
    return [moves[i] for i in order], cands


def _next_move(board: cshogi.Board, moves: list[int], target: bytes) -> int | None:
    """The legal move that turns `board` into the position `target`, trying the likeliest first."""
    hcp = np.empty(32, np.uint8)
    for move in moves:
        board.push(move)
        board.to_hcp(hcp)
        board.pop()
        if hcp.tobytes() == target:
            return move
    return None


class _DataGame:
    """A game being rebuilt from .data records; each move starts as its policy's most probable move and
    is replaced by the move that actually leads to the next record."""

    def __init__(self, hcp: np.ndarray, result: int):
        self.hcp = hcp.copy()
        self.result = result
        self.selected: list[int] = []
        self.candidates: list[np.ndarray] = []

    def add(self, cands: np.ndarray) -> None:
        self.selected.append(int(cands["move16"][0]))
        self.candidates.append(cands)

    def to_hcpe3(self) -> Hcpe3Game:
        infos = np.zeros(len(self.selected), MOVE_INFO)
        infos["selectedMove16"] = self.selected
        return Hcpe3Game(self.hcp, self.result, 0, infos, self.candidates)


def _data_games(path: Path, counts: Counter) -> Iterator[Hcpe3Game]:
    """Split a .data file into games: a record continues the game when it has the same result and
    follows from the previous position by one legal move. The move played from a game's last position
    is not recorded; the most probable move of its policy stands in for it."""
    data = read_data(path)
    board = cshogi.Board()
    game: _DataGame | None = None
    moves: list[int] = []
    for i in tqdm(range(len(data)), desc=path.name, unit="rec"):
        rec = data[i]
        hcp, result = rec["hcp"], int(rec["result"])
        move = None
        if game is not None and result == game.result:
            move = _next_move(board, moves, hcp.tobytes())
        if move is not None:
            game.selected[-1] = cshogi.move16(move)
            board.push(move)
        else:
            if game is not None:
                yield game.to_hcpe3()
                game = None
            board.set_hcp(hcp)  # read_data has checked every position
            game = _DataGame(hcp, result)
        moves, cands = _policy_candidates(board, rec["policy"])
        if not moves:  # a final position (mate): nothing to learn, and nothing can follow it
            counts["skipped: no legal moves"] += 1
            if game.selected:
                yield game.to_hcpe3()
            game = None
            continue
        game.add(cands)
        counts["positions"] += 1
    if game is not None:
        yield game.to_hcpe3()


def data_to_hcpe3(inputs: Iterable[PathLike], out: PathLike) -> Counter:
    """Seed .data files -> hcpe3; each stored policy becomes visitNum = round(p * 65535) over the legal
    moves (as Gumbel self-play stores it). The format has no value, so eval is 0."""
    counts: Counter = Counter()

    def games() -> Iterator[Hcpe3Game]:
        for path in usable_files(expand_inputs(inputs, (".data",), "data"), read_data, ".data"):
            for game in _data_games(path, counts):
                counts["games"] += 1
                yield game

    with atomic_write(out, "wb") as f:
        if not write_hcpe3_games(f, games()):
            raise UserError(f"no positions with legal moves in the inputs, nothing written ({dict(counts)})")
    return counts


# ---------------------------------------------------------------------------------------------------
# stats


def _result_split(counts: Counter, results: np.ndarray) -> None:
    game = results & RESULT_MASK
    counts["black wins"] += int(np.sum(game == BLACK_WIN))
    counts["white wins"] += int(np.sum(game == WHITE_WIN))
    counts["draws"] += int(np.sum(game == DRAW))


def _hcpe3_stats(path: Path, counts: Counter, lengths: list[int]) -> None:
    results = []
    for game in tqdm(iter_hcpe3_games(path), desc=path.name, unit="game"):
        n = len(game.moves)
        counts["games"] += 1
        counts["positions"] += n
        lengths.append(n)
        results.append(game.result)
        cand = game.moves["candidateNum"]
        counts["positions with candidates"] += int(np.count_nonzero(cand))
        counts["candidates"] += int(cand.sum())
        for name, bit in REASON_NAMES.items():
            counts[name] += bool(game.result & bit)
    _result_split(counts, np.asarray(results, np.int64))


def stats(inputs: Iterable[PathLike]) -> dict[str, float]:
    """Counts over hcpe3/hcpe/.data/cache files: games, positions, results (Black/White/draw), reasons,
    average candidates per position with candidates, moves per game."""
    suffixes = (".hcpe3", ".hcpe", ".data", ".cache", ".hcpe3cache")
    counts: Counter = Counter()
    lengths: list[int] = []
    for path, fmt in usable_files(expand_inputs(inputs, suffixes, "record"), detect_format, "record").items():
        counts["files"] += 1
        if fmt == "hcpe3":
            _hcpe3_stats(path, counts, lengths)
        elif fmt in ("hcpe", "data"):
            records = read_hcpe(path) if fmt == "hcpe" else read_data(path)
            counts["positions"] += len(records)
            _result_split(counts, np.asarray(records["gameResult" if fmt == "hcpe" else "result"], np.int64))
        else:
            cache = Hcpe3Cache(path)
            counts["positions"] += len(cache)
            for start in tqdm(range(0, len(cache), 65536), desc=path.name, unit="chunk"):
                _, _, _, pairs = cache.gather(np.arange(start, min(start + 65536, len(cache))))
                sizes = np.array([len(m) for m, _ in pairs])
                counts["positions with candidates"] += int(np.count_nonzero(sizes))
                counts["candidates"] += int(sizes.sum())
    out: dict[str, float] = dict(counts)
    if counts["positions with candidates"]:
        out["average candidates"] = counts["candidates"] / counts["positions with candidates"]
    if lengths:
        out["moves per game (mean)"] = float(np.mean(lengths))
        out["moves per game (min)"] = min(lengths)
        out["moves per game (max)"] = max(lengths)
    out.pop("candidates", None)
    return out


def format_counts(counts: dict[str, float]) -> str:
    """Aligned `name: value` lines, integers with thousands separators."""
    width = max((len(k) for k in counts), default=0)
    lines = []
    for key, value in counts.items():
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
        lines.append(f"{key + ':':<{width + 1}} {text}")
    return "\n".join(lines)
