"""Teacher games for distillation: a teacher plays itself by sampling its own policy, and each position is
written to hcpe3 with the teacher's most probable moves (the candidates' visit counts) and its value (the
eval). `bin/train --val-lambda 1` on them fits a network of another size to the teacher's outputs,
position by position, which needs no engine and far fewer games than learning from played moves: a smaller,
faster student for play at a fixed time on a CPU (models/README.md). The teacher is any
`train/teachers/teacher.Teacher`: one of our networks or miniosl's, which is given each game's history.

The candidates are the fewest likeliest moves that cover `top_mass` of the policy, at most `top_k`, plus
the move played (`compact_targets`): every legal move at 4 bytes each took 364 bytes a position of
miniosl's games from book openings, the defaults (0.99, 16) 30, with 5.9 candidates. Games start after
an opening (train/teachers/distill_openings.py) that is not written but is the teacher's history.

Game i is decided by its own random stream (seed, i) and its opening alone, and games are appended whole in
index order to the file (or chunk, train/teachers/distill_chunks.py) that holds them, so a stopped run
continues where it stopped and the same command always makes the same files.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from engine.core.position import board_hcp
from engine.core.rules import terminal
from engine.errors import UserError
from engine.match.openings import Opening, opening_board
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import Hcpe3Writer
from engine.selfplay.game import sample_move
from engine.selfplay.processes import stop_on_signals
from engine.selfplay.writer import VISIT_SCALE, GameRecord, to_hcpe3
from train.teachers.distill_chunks import check_chunk_settings, chunk_path, write_chunk_settings
from train.teachers.distill_openings import GameOpenings, OpeningPlan
from train.teachers.teacher import GamePosition, Teacher


@dataclass(frozen=True)
class Chunks:
    """Chunk files in a folder: `games` games each; a run makes chunks first..first+count-1."""

    games: int
    count: int
    first: int = 0


@dataclass
class DistillConfig:
    out: Path  # the hcpe3 file (appended to; its games so far are kept), or the folder of `chunks`
    games: int = 0  # games the file holds when the run ends (not with chunks)
    seed: int = 0
    temperature: float = 1.0  # of the policy the moves are sampled from (> 0; the targets are at 1)
    max_moves: int = 256  # plies before a game is drawn, the opening's included
    openings: OpeningPlan = field(default_factory=OpeningPlan)
    top_mass: float = 0.99  # the candidates cover this much of the policy...
    top_k: int = 16  # ...with at most this many moves (and the move played)
    chunks: Chunks | None = None
    teacher: str | None = None  # the teacher's name, for the chunks' settings
    progress: bool = True

    def validate(self) -> None:
        """A UserError for settings no run can use, or chunks made with other settings; creates nothing."""
        check_targets(self.top_mass, self.top_k)
        counts = [("--max-moves", self.max_moves)]
        if self.chunks is None:
            counts.append(("--games", self.games))
        else:
            counts += [("--chunk-games", self.chunks.games), ("--chunk-count", self.chunks.count)]
        for flag, value in counts:
            if value < 1:
                raise UserError(f"{flag} must be >= 1, got {value}")
        if self.chunks is not None and self.chunks.first < 0:
            raise UserError(f"--first-chunk must be >= 0, got {self.chunks.first}")
        if not self.temperature > 0:
            raise UserError(f"--temperature must be > 0, got {self.temperature}")
        self.openings.validate()
        if self.max_moves <= self.openings.longest:
            raise UserError(f"--max-moves must exceed the openings' {self.openings.longest} plies")
        if self.chunks is None:
            if self.out.exists() and not self.out.is_file():
                raise UserError(f"{self.out}: not a file")
        else:
            check_chunk_settings(self.out, self.settings())

    def settings(self) -> dict[str, Any]:
        """What decides a chunk's games: every chunk of a folder is made with the same."""
        return {
            "teacher": self.teacher,
            "seed": self.seed,
            "temperature": self.temperature,
            "max_moves": self.max_moves,
            "openings": self.openings.settings(),
            "top_mass": self.top_mass,
            "top_k": self.top_k,
            "chunk_games": self.chunks.games if self.chunks else None,
        }

    def parts(self) -> list[Part]:
        """The files this run fills, in game order."""
        if self.chunks is None:
            return [Part(self.out, 0, self.games)]
        games, first = self.chunks.games, self.chunks.first
        return [
            Part(chunk_path(self.out, i), i * games, games) for i in range(first, first + self.chunks.count)
        ]


@dataclass(frozen=True)
class Part:
    """An output file and the games it holds: indices first..first+games-1."""

    path: Path
    first: int
    games: int


@dataclass
class DistillStats:
    games: int = 0  # written by this run
    positions: int = 0
    repeats: int = 0  # positions of this run already written earlier in it
    bytes: int = 0
    seconds: float = 0.0
    interrupted: bool = False

    def summary(self) -> str:
        share = self.repeats / max(self.positions, 1)
        rate = self.positions / max(self.seconds, 1e-9)
        return (
            f"{self.games} games, {self.positions} positions written by this run ({rate:.0f}/s), "
            f"{self.repeats} of them repeat an earlier one ({share:.1%}), "
            f"{self.bytes / max(self.positions, 1):.1f} bytes/position"
        )

    def add(self, record: GameRecord, seen: set[bytes]) -> None:
        """Count a written game (`seen`: the positions written so far, for the repeats)."""
        self.games += 1
        self.positions += len(record)
        self.repeats += repeats(record.hcps, seen)

    def postfix(self, since: float) -> dict[str, Any]:
        """The progress bar's figures, for a run started at `since` (time.monotonic)."""
        return {
            "positions": self.positions,
            "pos_per_s": f"{self.positions / max(time.monotonic() - since, 1e-9):.0f}",
            "repeats": f"{self.repeats / max(self.positions, 1):.1%}",
        }


def check_targets(top_mass: float, top_k: int) -> None:
    """A UserError for candidate settings no run can use."""
    if top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {top_k}")
    if not 0 < top_mass <= 1:
        raise UserError(f"--top-mass must be in (0, 1], got {top_mass}")


def compact_targets(
    policy: np.ndarray, played: int, top_mass: float, top_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(indices into `policy`, visit counts) of the fewest likeliest moves covering `top_mass` of it, at
    most `top_k`, plus `played`: renormalised over them and quantised to VISIT_SCALE; moves whose count
    rounds to 0 are dropped, except the move played (at least 1)."""
    order = np.argsort(-policy, kind="stable")
    covered = int(np.searchsorted(np.cumsum(policy[order]), top_mass)) + 1
    keep = order[: min(covered, top_k)]
    if played not in keep:
        keep = np.append(keep, played)
    visits = np.rint(policy[keep] / policy[keep].sum() * VISIT_SCALE)
    visits[keep == played] = np.maximum(visits[keep == played], 1)
    return keep[visits > 0], visits[visits > 0]


def repeats(hcps: Iterable[np.ndarray], seen: set[bytes]) -> int:
    """How many of `hcps` are in `seen` (an hcp holds the side to move), adding the others."""
    count = 0
    for hcp in hcps:
        key = hcp.tobytes()
        count += key in seen
        seen.add(key)
    return count


class _Game:
    def __init__(self, index: int, seed: int, opening: Opening) -> None:
        self.index = index
        self.rng = np.random.default_rng([seed, index])
        self.start_sfen = opening_board(opening.position).sfen()
        self.board = opening.board()
        self.moves: list[int] = list(self.board.history)
        self.record = GameRecord(board_hcp(self.board))

    def position(self) -> GamePosition:
        return GamePosition(self.start_sfen, self.moves, self.board)


def existing_games(path: Path) -> int:
    """Whole games already in `path` (a partial last one is cut off by the writer)."""
    return sum(1 for _ in iter_hcpe3_games(path)) if path.exists() and path.stat().st_size else 0


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run_distill(
    teacher: Teacher, config: DistillConfig, stop: threading.Event | None = None,
    on_game: Callable[[int], None] | None = None,
) -> DistillStats:  # fmt: skip
    """Play until every file of `config.parts()` holds its games (or `stop` is set, or SIGINT/SIGTERM: the
    games in flight are dropped, the written ones kept); up to `teacher.max_batch` games at once."""
    config.validate()
    parts = config.parts()
    done = [existing_games(p.path) for p in parts]
    pending = [i for p, d in zip(parts, done, strict=True) for i in range(p.first + d, p.first + p.games)]
    openings = GameOpenings(config.openings, config.seed, pending[-1] + 1 if pending else 0)
    if config.chunks is not None:
        write_chunk_settings(config.out, config.settings())
    writers = [Hcpe3Writer(p.path) for p in parts]  # cuts off a partial last game, before the bar
    firsts = [p.first for p in parts]
    size_before = sum(file_size(p.path) for p in parts)
    stats, start = DistillStats(), time.monotonic()
    seen: set[bytes] = set()
    total = sum(p.games for p in parts)
    finished: dict[int, GameRecord] = {}
    playing: list[_Game] = []
    started = written = 0
    with (
        stop_on_signals(stop := stop or threading.Event()),
        tqdm(total=total, initial=total - len(pending), unit="game", disable=not config.progress) as bar,
    ):
        try:
            while written < len(pending) and not stop.is_set():
                while len(playing) < teacher.max_batch and started < len(pending):
                    index = pending[started]
                    playing.append(_Game(index, config.seed, openings[index]))
                    started += 1
                judgements = teacher.judge([game.position() for game in playing])
                still = []
                for game, judged in zip(playing, judgements, strict=True):
                    board = game.board
                    i = sample_move(judged.policy, config.temperature, game.rng)
                    keep, visits = compact_targets(judged.policy, i, config.top_mass, config.top_k)
                    move16s = (judged.moves & 0xFFFF).astype(np.uint16)  # cshogi.move16 of each
                    game.record.add(
                        board_hcp(board), int(move16s[i]), judged.value, move16s[keep], judged.labels[keep],
                        visits / VISIT_SCALE,
                    )  # fmt: skip
                    board.push(int(judged.moves[i]))
                    game.moves.append(int(judged.moves[i]))
                    end = terminal(board, config.max_moves)
                    if end is None:
                        still.append(game)
                        continue
                    game.record.result = end.result
                    finished[game.index] = game.record
                playing = still
                while written < len(pending) and pending[written] in finished and not stop.is_set():
                    index = pending[written]  # whole games, in order
                    record = finished.pop(index)
                    k = bisect.bisect_right(firsts, index) - 1
                    writers[k].write(to_hcpe3(record))
                    if index == parts[k].first + parts[k].games - 1:
                        writers[k].close()
                    written += 1
                    stats.add(record, seen)
                    bar.update(1)
                    bar.set_postfix(stats.postfix(start))
                    if on_game is not None:
                        on_game(total - len(pending) + written)
        finally:
            for w in writers:
                w.close()
    stats.bytes = sum(file_size(p.path) for p in parts) - size_before
    stats.seconds = time.monotonic() - start
    stats.interrupted = written < len(pending)
    return stats
