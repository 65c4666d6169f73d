"""Match openings: start positions and moves, from USI lines, random plies or an opening book's lines, and
which game uses which."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cshogi

from engine.core.rules import terminal
from engine.errors import UserError
from engine.records.formats import PathLike
from engine.records.osl_book import iter_book_positions, read_osl_book
from engine.usi_client import STARTPOS

DEFAULT_RANDOM_PLIES = 4  # random opening plies, so deterministic engines still play distinct games


def opening_board(position: str) -> cshogi.Board:
    """The board of a start position (`startpos` or `sfen <4 fields>`), before any moves."""
    return cshogi.Board() if position == STARTPOS else cshogi.Board(position[5:])


@dataclass(frozen=True)
class Opening:
    """A start position (`startpos` or `sfen <4 fields>`) and USI moves played from it."""

    position: str = STARTPOS
    moves: tuple[str, ...] = ()

    def board(self) -> cshogi.Board:
        board = opening_board(self.position)
        for m in self.moves:
            board.push_usi(m)
        return board

    def usi(self, extra: Sequence[str] = ()) -> str:
        moves = [*self.moves, *extra]
        return f"position {self.position}" + (" moves " + " ".join(moves) if moves else "")


def parse_opening(line: str) -> Opening:
    """A line as `position startpos moves ...`, `startpos moves ...`, `sfen ... moves ...` or a bare
    SFEN; ValueError if malformed or a move is illegal."""
    words = line.split()
    if words[:1] == ["position"]:
        words = words[1:]
    if "moves" in words:
        k = words.index("moves")
        head, moves = words[:k], words[k + 1 :]
    else:
        head, moves = words, []
    if head == [STARTPOS]:
        position = STARTPOS
    else:
        fields = head[1:] if head[:1] == ["sfen"] else head
        if len(fields) == 3:
            fields = [*fields, "1"]
        if len(fields) != 4 or fields[0].count("/") != 8 or fields[1] not in ("b", "w"):
            raise ValueError(f"not a position: {line.strip()!r}")
        position = "sfen " + " ".join(fields)
        if not cshogi.Board(position[5:]).is_ok():
            raise ValueError(f"not a legal position: {line.strip()!r}")
    board = opening_board(position)
    for i, m in enumerate(moves):
        move = board.move_from_usi(m)
        if not move or not board.is_legal(move):
            raise ValueError(f"move {i + 1} {m!r} is illegal in {line.strip()!r}")
        board.push(move)
    if terminal(board, None) is not None:
        raise ValueError(f"the game is already over: {line.strip()!r}")
    return Opening(position, tuple(moves))


def read_openings(path: str | os.PathLike) -> list[Opening]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise UserError(f"--openings {path}: {e.strerror or e}") from None
    openings = []
    for n, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                openings.append(parse_opening(line))
            except ValueError as e:
                raise UserError(f"--openings {path}:{n}: {e}") from None
    if not openings:
        raise UserError(f"--openings {path}: no positions in the file")
    return openings


def distinct_openings(lines: Callable[[], list[str]], count: int, plies: int, attempts: int) -> list[Opening]:
    """Up to `count` distinct lines of exactly `plies` moves from the start, of `attempts` drawn."""
    seen: set[tuple[str, ...]] = set()
    openings: list[Opening] = []
    for _ in range(attempts):
        key = tuple(lines())
        if len(key) == plies and key not in seen:
            seen.add(key)
            openings.append(Opening(STARTPOS, key))
            if len(openings) == count:
                break
    return openings


def random_openings(count: int, plies: int, seed: int = 0) -> list[Opening]:
    """`count` distinct openings of `plies` uniformly random legal moves from the start (none over)."""
    if plies <= 0:
        return [Opening()]
    rng = random.Random(seed)

    def line() -> list[str]:
        board, moves = cshogi.Board(), []
        for _ in range(plies):
            move = rng.choice(list(board.legal_moves))
            board.push(move)
            moves.append(cshogi.move_to_usi(move))
            if terminal(board, None) is not None:
                break
        return moves

    return distinct_openings(line, count, plies, count * 20)


def book_openings(path: PathLike, count: int, plies: int, seed: int = 0) -> list[Opening]:
    """`count` distinct openings of `plies` moves along an OSL opening book's lines (gpsshogi's
    `joseki.dat`): at each position a move is drawn in proportion to the games that reached its
    next position, so the openings are the ones strong players choose, common ones most often.
    Lines that leave the book before `plies` are not used."""
    book = read_osl_book(path)
    positions = {p.index: p for p in iter_book_positions(book)}  # every move checked legal there
    games = {i: p.black_wins + p.white_wins for i, p in positions.items()}
    rng = random.Random(seed)

    def line() -> list[str]:
        index, moves = book.start, []
        while len(moves) < plies and positions[index].moves:
            options = positions[index].moves
            reach = [games[nxt] for _, _, nxt in options]
            usi, _, index = rng.choices(options, weights=reach if sum(reach) else None)[0]
            moves.append(usi)
        return moves

    openings = distinct_openings(line, count, plies, count * 50)
    if not openings:
        raise UserError(f"{path}: no line of the book is {plies} moves long")
    return openings


def game_opening(openings: Sequence[Opening], game: int, paired: bool) -> Opening:
    """The opening of game `game` (0-based): paired, games 2k and 2k+1 share opening k (colours
    swapped); unpaired, game k has opening k. Openings are reused cyclically when there are too few."""
    return openings[(game // 2 if paired else game) % len(openings)]


def repeated_games(games: int, openings: Sequence[Opening], paired: bool = True) -> int:
    """How many of `games` start like an earlier game (same opening, same colours): deterministic
    engines replay those move for move, so they add no information."""
    starts = {(game_opening(openings, i, paired), i % 2) for i in range(games)}
    return games - len(starts)
