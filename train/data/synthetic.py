"""Synthetic, learnable record files for tests and benchmarks (no engine needed to make them).

Positions come from random legal games; the targets are deterministic functions of the position, so
a small network can learn them and a test can tell learning from noise:
- target move: the first legal move in cshogi's generation order;
- result: the side to move wins if it has a piece in hand, else it loses.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import cshogi
import numpy as np

from engine.core.moves import NUM_MOVE_LABELS, legal_moves_and_labels
from engine.core.position import board_hcp
from engine.core.rules import BLACK_WIN, WHITE_WIN
from engine.records import writers
from engine.records.formats import DATA, HCPE, MOVE_INFO, MOVE_VISITS, OPPONENT_SELFPLAY, Hcpe3Game


def target_move(board: cshogi.Board) -> int:
    return next(iter(board.legal_moves))


def target_winner(board: cshogi.Board) -> int:
    hand = board.pieces_in_hand[board.turn]
    return board.turn if any(hand) else cshogi.opponent(board.turn)


def _result_byte(winner: int) -> int:
    return BLACK_WIN if winner == cshogi.BLACK else WHITE_WIN


def random_games(seed: int, max_plies: int = 120) -> Iterator[tuple[cshogi.Board, list[int]]]:
    """Endless (start board, moves) of random games; captures are preferred so hands fill."""
    rng = random.Random(seed)
    while True:
        board = cshogi.Board()
        start = board.copy()
        moves: list[int] = []
        for _ in range(rng.randrange(10, max_plies)):
            legal = list(board.legal_moves)
            if not legal or len(legal) == 1:
                break
            captures = [m for m in legal if cshogi.move_cap(m)]
            move = rng.choice(captures) if captures and rng.random() < 0.5 else rng.choice(legal)
            moves.append(move)
            board.push(move)
        if moves:
            yield start, moves


def random_positions(n: int, seed: int = 0) -> Iterator[cshogi.Board]:
    count = 0
    for start, moves in random_games(seed):
        board = start.copy()
        for move in moves:
            yield board
            count += 1
            if count == n:
                return
            board.push(move)


def soft_policy(board: cshogi.Board, target_share: float = 0.75) -> np.ndarray:
    """A dense target: `target_share` on the target move, the rest spread over the other legal moves."""
    policy = np.zeros(NUM_MOVE_LABELS, np.float32)
    moves, labels = legal_moves_and_labels(board)
    rest = (1 - target_share) / max(len(labels) - 1, 1) if len(labels) > 1 else 0.0
    policy[labels] = rest
    policy[labels[moves == target_move(board)]] = target_share if len(labels) > 1 else 1.0
    return policy


def write_hcpe(path: str | os.PathLike, n: int, seed: int = 0) -> None:
    recs = np.zeros(n, HCPE)
    for i, board in enumerate(random_positions(n, seed)):
        recs[i]["hcp"] = board_hcp(board)
        recs[i]["bestMove16"] = cshogi.move16(target_move(board))
        recs[i]["gameResult"] = _result_byte(target_winner(board))
        recs[i]["eval"] = 600 if target_winner(board) == board.turn else -600
    writers.write_hcpe(path, recs)


def write_data(path: str | os.PathLike, n: int, seed: int = 0) -> None:
    recs = np.zeros(n, DATA)
    for i, board in enumerate(random_positions(n, seed)):
        recs[i]["hcp"] = board_hcp(board)
        recs[i]["policy"] = soft_policy(board)
        recs[i]["result"] = _result_byte(target_winner(board))
    writers.write_data(path, recs)


def write_hcpe3(path: str | os.PathLike, games: int, seed: int = 0) -> int:
    """Random games whose candidates favour the target move; the game result is that of the
    start-of-game rule applied to the final position (a true game-level result). Returns positions."""
    out = []
    positions = 0
    for _, (start, moves) in zip(range(games), random_games(seed), strict=False):
        board = start.copy()
        info = np.zeros(len(moves), MOVE_INFO)
        candidates = []
        for k, move in enumerate(moves):
            legal, _ = legal_moves_and_labels(board)
            visits = np.where(legal == target_move(board), 3000, 100).astype(np.uint16)
            cand = np.zeros(len(legal), MOVE_VISITS)
            cand["move16"] = legal & 0xFFFF
            cand["visitNum"] = visits
            candidates.append(cand)
            info[k]["selectedMove16"] = cshogi.move16(move)
            info[k]["eval"] = 300 if target_winner(board) == board.turn else -300
            board.push(move)
        positions += len(moves)
        result = _result_byte(target_winner(board))
        out.append(Hcpe3Game(board_hcp(start), result, OPPONENT_SELFPLAY, info, candidates))
    writers.write_hcpe3_games(path, out)
    return positions
