"""Exact game-end rules (via cshogi), shared by self-play, the USI search and record writers.

Values are from the side to move's point of view: 1 win, 0 loss, `draw` for a draw.
Results use hcpe3's encoding (engine/core/results.py): bits 0-1 winner (0 draw, 1 Black, 2 White) plus
reason bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import cshogi

from engine.core.results import (
    BLACK_WIN,
    DEFAULT_MAX_MOVES,
    DRAW,
    MAX_MOVES,
    NYUGYOKU,
    RESULT_MASK,
    SENNICHITE,
    WHITE_WIN,
)

SENNICHITE_OCCURRENCES = 4  # the official rule: the same position (board, hands, side) four times


@dataclass(frozen=True)
class Terminal:
    """How the game stands at a finished position: `winner` is a colour or None for a draw."""

    winner: int | None
    reason: int  # 0 (no legal moves), SENNICHITE, NYUGYOKU or MAX_MOVES

    def value(self, turn: int, draw: float = 0.5) -> float:
        if self.winner is None:
            return draw
        return 1.0 if self.winner == turn else 0.0

    @property
    def result(self) -> int:
        """The hcpe3 result byte."""
        side = DRAW if self.winner is None else (BLACK_WIN if self.winner == cshogi.BLACK else WHITE_WIN)
        return side | self.reason


def win_for(color: int, reason: int = 0) -> Terminal:
    return Terminal(color, reason)


def terminal(
    board: cshogi.Board,
    max_moves: int | None = DEFAULT_MAX_MOVES,
    repetition_ply: int | None = None,
    check_nyugyoku: bool = True,
    repetition: bool = True,
) -> Terminal | None:
    """The game-end state of `board` for the side to move, or None if play goes on.

    Order matters: a declared nyugyoku wins before anything else (the mover declares instead of
    moving); a repetition is judged on the position reached (first repetition = sennichite, as in
    dlshogi; perpetual check loses for the checker); no legal moves loses; then the move limit.
    `max_moves` counts plies played (the game is drawn once `max_moves` plies have been played).
    `repetition=False` leaves repetitions to the caller (an arbiter applying the four-fold rule).
    """
    return terminal_and_moves(board, max_moves, repetition_ply, check_nyugyoku, repetition)[0]


def terminal_and_moves(
    board: cshogi.Board,
    max_moves: int | None = DEFAULT_MAX_MOVES,
    repetition_ply: int | None = None,
    check_nyugyoku: bool = True,
    repetition: bool = True,
) -> tuple[Terminal | None, cshogi.LegalMoveList | None]:
    """`terminal`, and when play goes on the position's legal moves (an unread cshogi iterator), so
    that a search expanding the position generates them once."""
    turn = board.turn
    if check_nyugyoku and board.is_nyugyoku():
        return win_for(turn, NYUGYOKU), None
    if repetition:
        rep = board.is_draw(repetition_ply) if repetition_ply is not None else board.is_draw()
        if rep:
            ended = _repetition_end(rep, turn)
            if ended is not None:
                return ended, None
    moves = board.legal_moves
    if not len(moves):
        return win_for(cshogi.opponent(turn)), None
    if max_moves is not None and board.move_number - 1 >= max_moves:
        return Terminal(None, MAX_MOVES), None
    return None, moves


def _repetition_end(rep: int, turn: int) -> Terminal | None:
    """cshogi's repetition verdict as a game end (perpetual check loses for the checker)."""
    if rep == cshogi.REPETITION_DRAW:
        return Terminal(None, SENNICHITE)
    if rep == cshogi.REPETITION_WIN:
        return win_for(turn, SENNICHITE)
    if rep == cshogi.REPETITION_LOSE:
        return win_for(cshogi.opponent(turn), SENNICHITE)
    return None


def game_terminal(
    board: cshogi.Board, occurrences: dict[int, int], max_moves: int | None = DEFAULT_MAX_MOVES
) -> Terminal | None:
    """The official end of a game being played (for arbiters, not searches): sennichite only when the
    position occurs for the fourth time. `occurrences` counts positions by `zobrist_hash()` (board,
    hands and side to move) and must already include the current one. Nyugyoku ends a game only by
    declaration, which the arbiter judges itself."""
    if occurrences.get(board.zobrist_hash(), 0) >= SENNICHITE_OCCURRENCES:
        ended = _repetition_end(board.is_draw(), board.turn)
        return ended if ended is not None else Terminal(None, SENNICHITE)
    return terminal(board, max_moves, check_nyugyoku=False, repetition=False)


__all__ = [  # engine.core.results' codes too: the modules that judge games import them from here
    "BLACK_WIN",
    "DEFAULT_MAX_MOVES",
    "DRAW",
    "MAX_MOVES",
    "NYUGYOKU",
    "RESULT_MASK",
    "SENNICHITE",
    "SENNICHITE_OCCURRENCES",
    "WHITE_WIN",
    "Terminal",
    "game_terminal",
    "terminal",
    "terminal_and_moves",
    "win_for",
]
