"""Self-play output: finished games go through a queue to a background thread that appends them whole.

Search never waits for the disk. Each game is appended in one piece (hcpe3 through `Hcpe3Writer`,
.data through `append_data`), so an interrupted run leaves only whole games; `close()` drains the
queue before returning, so every finished game is written.

Moves played by an external USI engine carry no policy target: in hcpe3 they are MoveInfos with
candidateNum 0 (the engine's score as eval), and the header's `opponent` says which colour it played;
the .data format has no place for them, so their positions are left out (the game's other positions
keep its result).
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.core.moves import NUM_MOVE_LABELS
from engine.core.rules import RESULT_MASK
from engine.core.score import value_to_eval
from engine.records.formats import DATA, MOVE_INFO, MOVE_VISITS, OPPONENT_SELFPLAY, Hcpe3Game
from engine.records.writers import Hcpe3Writer, append_data, encode_hcpe3_game
from engine.selfplay.config import FORMATS

VISIT_SCALE = 65535  # hcpe3 visitNum holds round(p * 65535) of the improved policy


_NO_MOVES = np.zeros(0, np.uint16)
_NO_LABELS = np.zeros(0, np.int64)
_NO_POLICY = np.zeros(0, np.float32)


@dataclass
class GameRecord:
    """One finished game: per position its hcp, played move, value (win probability of the side to
    move) and policy target over the legal moves; a move without a target has empty arrays."""

    start_hcp: np.ndarray
    result: int = 0  # hcpe3 result byte (winner | reason bits)
    opponent: int = OPPONENT_SELFPLAY  # hcpe3 header: who the USI engine played, if any
    game_id: int = -1  # the game's index in its run (its seed): a cluster's driver keeps each id once
    hcps: list[np.ndarray] = field(default_factory=list)
    move16s: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    candidates: list[np.ndarray] = field(default_factory=list)  # move16 of every legal move
    labels: list[np.ndarray] = field(default_factory=list)
    policies: list[np.ndarray] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.move16s)

    def add(
        self,
        hcp: np.ndarray,
        move16: int,
        value: float,
        candidates: np.ndarray = _NO_MOVES,
        labels: np.ndarray = _NO_LABELS,
        policy: np.ndarray = _NO_POLICY,
    ) -> None:
        """Record one position and the move played there; leave out the target arrays for a move
        that has no policy target (an external engine's)."""
        self.hcps.append(hcp)
        self.move16s.append(move16)
        self.values.append(value)
        self.candidates.append(candidates)
        self.labels.append(labels)
        self.policies.append(policy)

    @property
    def targets(self) -> int:
        """Positions with a policy target."""
        return sum(len(p) > 0 for p in self.policies)


def to_hcpe3(game: GameRecord) -> Hcpe3Game:
    moves = np.zeros(len(game), MOVE_INFO)
    moves["selectedMove16"] = game.move16s
    moves["eval"] = [value_to_eval(v) for v in game.values]
    cands = []
    for move16, p in zip(game.candidates, game.policies, strict=True):
        c = np.empty(len(move16), MOVE_VISITS)
        c["move16"] = move16
        c["visitNum"] = np.rint(np.asarray(p) * VISIT_SCALE)
        cands.append(c)
    return Hcpe3Game(game.start_hcp, game.result, game.opponent, moves, cands)


def to_data(game: GameRecord) -> np.ndarray:
    """The seed's fixed-size records: dense policy over the 2187 labels, result without reason bits.
    Positions without a policy target (an external engine's moves) are left out."""
    rows = [
        (hcp, labels, p)
        for hcp, labels, p in zip(game.hcps, game.labels, game.policies, strict=True)
        if len(p)
    ]
    rec = np.zeros(len(rows), DATA)
    for i, (hcp, labels, p) in enumerate(rows):
        rec[i]["hcp"] = hcp
        policy = np.zeros(NUM_MOVE_LABELS, np.float32)
        policy[labels] = p
        rec[i]["policy"] = policy
    rec["result"] = game.result & RESULT_MASK
    return rec


def output_path(out_dir: str | Path, fmt: str, tag: str = "") -> Path:
    """selfplay-YYYYmmdd-HHMMSS-host-pid[tag].ext: distinct per run and per worker process."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    host = socket.gethostname().split(".")[0] or "host"
    return Path(out_dir) / f"selfplay-{stamp}-{host}-{os.getpid()}{tag}.{fmt}"


class GameWriter:
    """Background writer thread fed by a queue of `GameRecord`s."""

    def __init__(self, path: str | Path, fmt: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        self.path = Path(path)
        self.fmt = fmt
        self.games = 0
        self.positions = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[GameRecord | None] = queue.Queue()
        self._hcpe3 = Hcpe3Writer(self.path) if fmt == "hcpe3" else None
        self._thread = threading.Thread(target=self._loop, name="selfplay-writer", daemon=True)
        self._thread.start()

    def put(self, game: GameRecord) -> None:
        if self.error is not None:
            raise RuntimeError(f"{self.path}: writer failed: {self.error}") from self.error
        self._queue.put(game)

    def _write(self, game: GameRecord) -> None:
        if self._hcpe3 is not None:
            self._hcpe3.write(to_hcpe3(game))
        else:
            append_data(self.path, to_data(game))
        self.games += 1
        self.positions += len(game) if self._hcpe3 is not None else game.targets

    def _loop(self) -> None:
        while (game := self._queue.get()) is not None:
            if self.error is None:
                try:
                    self._write(game)
                except BaseException as e:  # keep draining so close() cannot hang; put() reports it
                    self.error = e

    def close(self) -> None:
        """Write every queued game, then close the file."""
        self._queue.put(None)
        self._thread.join()
        if self._hcpe3 is not None:
            self._hcpe3.close()
        if self.error is not None:
            raise RuntimeError(f"{self.path}: writer failed: {self.error}") from self.error


OnRecord = Callable[[int, bytes], None]  # (game id, the whole game encoded as hcpe3)


class RecordSink:
    """A writer that writes nothing here: each finished game goes, whole and encoded as hcpe3, to a
    callback (a cluster actor's worker sends it up; only the cluster's driver writes files)."""

    path: Path | None = None

    def __init__(self, send: OnRecord) -> None:
        self.send = send

    def put(self, game: GameRecord) -> None:
        self.send(game.game_id, encode_hcpe3_game(to_hcpe3(game)))

    def close(self) -> None:
        """Nothing is buffered."""
