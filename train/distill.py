"""Teacher games for distillation: a trained network plays itself by sampling its own policy, and each
position is written to hcpe3 with the teacher's policy over every legal move (the candidates' visit
counts) and its value (the eval). `bin/train --val-lambda 1` on them fits a network of another size to the
teacher's outputs, position by position, which needs no engine and far fewer games than learning from
played moves: a smaller, faster student for play at a fixed time on a CPU (models/README.md).

Game i is decided by its own random stream (seed, i) alone, and games are appended whole in index order,
so a stopped run continues where it stopped and the same command always makes the same file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cshogi
import numpy as np
from tqdm import tqdm

from engine.backends.evaluator import Evaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.core.position import board_hcp
from engine.core.rules import terminal
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import Hcpe3Writer
from engine.search import gumbel
from engine.selfplay.game import sample_move
from engine.selfplay.processes import stop_on_signals
from engine.selfplay.writer import GameRecord, to_hcpe3


@dataclass
class DistillConfig:
    out: Path  # the hcpe3 file (appended to; its games so far are kept)
    games: int  # games the file holds when the run ends
    seed: int = 0
    temperature: float = 1.0  # of the policy the moves are sampled from (> 0; the targets are at 1)
    max_moves: int = 256  # plies before a game is drawn
    progress: bool = True


def teacher_policy(logits: np.ndarray) -> np.ndarray:
    """The teacher's move probabilities over the legal moves, from their logits."""
    return gumbel.softmax(np.asarray(logits, np.float64))


class _Game:
    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = np.random.default_rng([seed, index])
        self.board = cshogi.Board()
        self.record = GameRecord(board_hcp(self.board))


def existing_games(path: Path) -> int:
    """Whole games already in `path` (a partial last one is cut off by the writer)."""
    return sum(1 for _ in iter_hcpe3_games(path)) if path.exists() and path.stat().st_size else 0


def run_distill(
    ev: Evaluator, config: DistillConfig, stop: threading.Event | None = None,
    on_game: Callable[[int], None] | None = None,
) -> int:  # fmt: skip
    """Play until `config.out` holds `config.games` games (or `stop` is set, or SIGINT/SIGTERM: the games
    in flight are dropped, the written ones kept); up to `ev.max_batch` games at once. Returns positions
    written by this run."""
    stop = stop or threading.Event()
    done = existing_games(config.out)
    next_index, positions, start = done, 0, time.monotonic()
    finished: dict[int, GameRecord] = {}
    playing: list[_Game] = []
    with (
        Hcpe3Writer(config.out) as writer,
        stop_on_signals(stop),
        tqdm(total=config.games, initial=done, unit="game", disable=not config.progress) as bar,
    ):
        while done < config.games and not stop.is_set():
            while len(playing) < ev.max_batch and next_index < config.games:
                playing.append(_Game(next_index, config.seed))
                next_index += 1
            for k, game in enumerate(playing):
                fill_features(game.board, ev.x1[k], ev.x2[k])
            logits, values = ev.evaluate(len(playing))
            still = []
            for k, game in enumerate(playing):
                board = game.board
                moves, labels = legal_moves_and_labels(board)
                own = logits[k][labels]
                policy = teacher_policy(own)
                i = sample_move(policy, config.temperature, game.rng)
                move16s = (np.asarray(moves, np.int64) & 0xFFFF).astype(np.uint16)  # cshogi.move16 of each
                game.record.add(board_hcp(board), int(move16s[i]), float(values[k]), move16s, labels, policy)
                board.push(int(moves[i]))
                end = terminal(board, config.max_moves)
                if end is None:
                    still.append(game)
                    continue
                game.record.result = end.result
                finished[game.index] = game.record
            playing = still
            while done in finished:  # whole games, in index order
                record = finished.pop(done)
                writer.write(to_hcpe3(record))
                positions += len(record)
                done += 1
                bar.update(1)
                bar.set_postfix(
                    positions=positions, pos_per_s=f"{positions / (time.monotonic() - start):.0f}"
                )
                if on_game is not None:
                    on_game(done)
    return positions
