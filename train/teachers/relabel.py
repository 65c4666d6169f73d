"""Games another player made, labelled again by a distillation teacher: every position of the hcpe3 games
in the sources (a gpsshogi corpus, `bin/selfplay`'s or the loop's games, a student's) gets the teacher's
likeliest moves and its value, while the move played and the game's result stay the source's. That is
DAgger's half of distillation: the teacher labels the positions another player reaches (the student's
mistakes included), not only those its own games reach; and it sees each one with its game's history.

One game is written for each source game, whole and in the sources' order, so a stopped run continues
after the games its output holds and the same command makes the same file. OUT.relabel.json records the
teacher, the sources (with their sizes) and the targets' settings; a run with others is refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cshogi
import numpy as np
from tqdm import tqdm

from engine.core.position import board_hcp
from engine.errors import UserError
from engine.fileio import atomic_write_text, check_settings_file
from engine.records.formats import Hcpe3Game
from engine.records.hcpe3_games import check_hcpe3, existing_file, iter_hcpe3_games
from engine.records.writers import Hcpe3Writer
from engine.selfplay.processes import stop_on_signals
from engine.selfplay.writer import VISIT_SCALE, GameRecord, to_hcpe3
from train.teachers.distill import DistillStats, check_targets, compact_targets, existing_games, file_size
from train.teachers.teacher import GamePosition, Judgement, Teacher

SETTINGS_SUFFIX = ".relabel.json"


@dataclass
class RelabelConfig:
    sources: Sequence[Path]  # hcpe3 files, read in this order
    out: Path  # the hcpe3 file written (appended to: its games so far are kept)
    top_mass: float = 0.99
    top_k: int = 16
    teacher: str | None = None  # the teacher's name, for the settings
    progress: bool = True

    @property
    def settings_path(self) -> Path:
        return self.out.with_name(self.out.name + SETTINGS_SUFFIX)

    def settings(self) -> dict[str, Any]:
        """What decides the output: a rerun with the same continues it."""
        return {
            "teacher": self.teacher,
            "sources": [[str(p.resolve()), p.stat().st_size] for p in self.sources],
            "top_mass": self.top_mass,
            "top_k": self.top_k,
        }

    def validate(self) -> None:
        """A UserError for sources that are not hcpe3, an unusable OUT, or an OUT made from other
        sources or settings; creates nothing."""
        check_targets(self.top_mass, self.top_k)
        if not self.sources:
            raise UserError("--relabel needs at least one hcpe3 file")
        for source in self.sources:
            check_hcpe3(existing_file(source))
            if source.resolve() == self.out.resolve():
                raise UserError(f"{source}: a source cannot be OUT too; write the relabelled games elsewhere")
        if self.out.exists() and not self.out.is_file():
            raise UserError(f"{self.out}: not a file")
        check_settings_file(self.settings_path, self.settings(), "games relabelled")


@dataclass
class _Game:
    """A source game replayed: its positions, each with the history the teacher sees."""

    source: Hcpe3Game
    positions: list[GamePosition]


def replay(game: Hcpe3Game, where: str) -> _Game:
    """The positions of `game` before each of its moves; a UserError naming `where` for an illegal move."""
    board = cshogi.Board()
    board.set_hcp(game.hcp)
    start, moves, positions = board.sfen(), [], []
    for ply, move16 in enumerate(game.moves["selectedMove16"].tolist()):
        move = board.move_from_move16(move16)
        if not board.is_legal(move):
            raise UserError(f"{where}, move {ply + 1}: {move16:#06x} is not a legal move in {board.sfen()}")
        positions.append(GamePosition(start, tuple(moves), board.copy()))
        board.push(move)
        moves.append(move)
    return _Game(game, positions)


def source_games(sources: Sequence[Path]) -> Iterator[tuple[str, Hcpe3Game]]:
    """Every whole game of the sources in order, with where it is (for error messages)."""
    for path in sources:
        for k, game in enumerate(iter_hcpe3_games(path)):
            yield f"{path}: game {k + 1}", game


def relabelled(game: _Game, judgements: Sequence[Judgement], top_mass: float, top_k: int) -> GameRecord:
    """The source game with the teacher's candidates and value at every position."""
    source = game.source
    record = GameRecord(source.hcp.copy(), result=source.result, opponent=source.opponent)
    for position, judged, move16 in zip(
        game.positions, judgements, source.moves["selectedMove16"].tolist(), strict=True
    ):
        move16s = (judged.moves & 0xFFFF).astype(np.uint16)
        played = int(np.flatnonzero(move16s == move16)[0])
        keep, visits = compact_targets(judged.policy, played, top_mass, top_k)
        record.add(
            board_hcp(position.board), move16, judged.value, move16s[keep], judged.labels[keep],
            visits / VISIT_SCALE,
        )  # fmt: skip
    return record


def judge_all(teacher: Teacher, positions: Sequence[GamePosition]) -> list[Judgement]:
    """The teacher's answers for `positions`, in batches of at most its `max_batch`."""
    step = teacher.max_batch
    return [j for k in range(0, len(positions), step) for j in teacher.judge(positions[k : k + step])]


def run_relabel(
    teacher: Teacher, config: RelabelConfig, stop: threading.Event | None = None,
    on_game: Callable[[int], None] | None = None,
) -> DistillStats:  # fmt: skip
    """Relabel the sources' games after those OUT holds, until all are written or `stop` is set (or
    SIGINT/SIGTERM: the games being judged are dropped, the written ones kept)."""
    config.validate()
    done = existing_games(config.out)
    total = sum(1 for _ in source_games(config.sources))
    if done > total:
        raise UserError(f"{config.out}: holds {done} games, more than the sources' {total}")
    if not config.settings_path.exists():
        atomic_write_text(config.settings_path, json.dumps(config.settings(), indent=1) + "\n")
    writer = Hcpe3Writer(config.out)  # cuts off a partial last game, before the bar
    size_before = file_size(config.out)
    stats, start, seen = DistillStats(), time.monotonic(), set()
    games = (replay(game, where) for k, (where, game) in enumerate(source_games(config.sources)) if k >= done)
    with (
        stop_on_signals(stop := stop or threading.Event()),
        tqdm(total=total, initial=done, unit="game", disable=not config.progress) as bar,
    ):
        try:
            while not stop.is_set():
                group, error = _group(games, teacher.max_batch)
                judgements = judge_all(teacher, [p for g in group for p in g.positions])
                offset = 0
                for game in group:
                    if stop.is_set():
                        break
                    mine = judgements[offset : offset + len(game.positions)]
                    offset += len(game.positions)
                    record = relabelled(game, mine, config.top_mass, config.top_k)
                    writer.write(to_hcpe3(record))
                    stats.add(record, seen)
                    bar.update(1)
                    bar.set_postfix(stats.postfix(start))
                    if on_game is not None:
                        on_game(done + stats.games)
                if error is not None and not stop.is_set():
                    raise error  # after the whole games before it
                if not group:
                    break
        finally:
            writer.close()
    stats.bytes = file_size(config.out) - size_before
    stats.seconds = time.monotonic() - start
    stats.interrupted = done + stats.games < total
    return stats


def _group(games: Iterator[_Game], positions: int) -> tuple[list[_Game], UserError | None]:
    """The next games of `games` holding at least `positions` positions in all (fewer at the end), and
    the error that cut the group short (an illegal move in the next game), if one did."""
    group: list[_Game] = []
    try:
        while sum(len(g.positions) for g in group) < positions:
            game = next(games, None)
            if game is None:
                break
            group.append(game)
    except UserError as e:
        return group, e
    return group, None
