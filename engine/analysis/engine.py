"""Our USI engine as an analyst: one process for a whole run (the project's USI client, with its deadlines),
asked for each position's MultiPV lines, which are read back as candidates, best first.

Scores stay on the engine's scale: `score cp` is dlshogi's eval (engine.core.score), so the win
probability is the engine's own value; a `score mate N` is a certain result (MATE_CP as a number, as
GUIs write mate scores). Positions the rules decide (a mate on the board, a nyugyoku declaration) are
judged here without asking the engine, which answers them with no search.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import cshogi

from engine.core.score import eval_to_value
from engine.paths import REPO_ROOT
from engine.usi_client import ENGINE_ERROR, EngineFailure, EngineSpec, UsiProcess

ENGINE = REPO_ROOT / "bin" / "usi_engine"
MATE_CP = 30000  # a mate score as a number (ShogiGUI's and ShogiHome's convention)


@dataclass
class Candidate:
    """One MultiPV line, from the side to move's view."""

    move: str  # USI
    cp: int
    mate: int | None  # plies to a mate (negative: the side to move is mated); None: no mate known
    pv: list[str]

    @property
    def win(self) -> float:
        """The side to move's win probability."""
        if self.mate is not None:
            return 1.0 if self.mate > 0 else 0.0
        return float(eval_to_value(self.cp))


@dataclass
class Thought:
    """The engine's view of one position: its move and its candidates, best first. A position the rules
    decide has no candidates: `bestmove` is then "resign" (mated) or "win" (a nyugyoku declaration)."""

    bestmove: str
    candidates: list[Candidate] = field(default_factory=list)
    nodes: int = 0

    @property
    def win(self) -> float:
        """The side to move's win probability."""
        return self.candidates[0].win if self.candidates else float(self.bestmove == "win")

    @property
    def cp(self) -> int:
        return self.candidates[0].cp if self.candidates else (MATE_CP if self.bestmove == "win" else -MATE_CP)

    @property
    def mate(self) -> int | None:
        """Plies to a mate (negative: the side to move is mated; 0: decided on the board)."""
        return self.candidates[0].mate if self.candidates else 0


def ruled(board: cshogi.Board) -> Thought | None:
    """The verdict on a position the rules decide (no legal move: mated; a nyugyoku declaration: won)."""
    if board.is_game_over():
        return Thought("resign")
    if board.is_nyugyoku():
        return Thought("win")
    return None


def parse_info(words: list[str]) -> tuple[int, Candidate, int] | None:
    """(multipv index, candidate, nodes) of an `info ... score ... pv ...` line's words; None otherwise."""
    if "score" not in words or "pv" not in words or words[1:2] == ["string"]:
        return None
    k = words.index("score")
    kind, value = words[k + 1 : k + 3]
    pv = words[words.index("pv") + 1 :]
    index = int(words[words.index("multipv") + 1]) if "multipv" in words else 1
    nodes = int(words[words.index("nodes") + 1]) if "nodes" in words else 0
    if kind == "mate":
        digits = value.lstrip("+-")  # some engines write `mate +` / `mate -` without the length
        mate = (-1 if value.startswith("-") else 1) * (int(digits) if digits.isdigit() else 1)
        cp = MATE_CP if mate > 0 else -MATE_CP
    else:
        mate, cp = None, int(value)
    return index, Candidate(pv[0], cp, mate, pv), nodes


class AnalysisEngine(UsiProcess):
    """UsiProcess that collects a search's info lines (the client's `go` keeps only the last score)."""

    def think(self, sfen: str, moves: list[str], go: str, wait: float) -> Thought:
        """The engine's candidates for the position `sfen` + `moves` after `go` (e.g. `go nodes 1000`);
        EngineFailure if it reports an error or gives no answer within `wait` seconds."""
        head = "position startpos" if sfen == cshogi.STARTING_SFEN else f"position sfen {sfen}"
        self._send(head + (" moves " + " ".join(moves) if moves else ""))
        self._send(go)
        deadline = time.monotonic() + wait
        lines: dict[int, Candidate] = {}
        nodes = 0
        while True:
            line = self._read(max(0.0, deadline - time.monotonic()))
            words = line.split()
            if line.startswith(ENGINE_ERROR):
                self._finish_search()
                raise EngineFailure(f"{self.name}: {line[len(ENGINE_ERROR) :].strip()}")
            if words[:1] == ["info"] and (info := parse_info(words)) is not None:
                index, candidate, n = info
                if index == 1:
                    lines.clear()  # a new report: the lines of an earlier one may have changed order
                    nodes = n
                lines[index] = candidate
            elif words[:1] == ["bestmove"]:
                best = words[1] if len(words) > 1 else "resign"
                if not lines:
                    raise EngineFailure(f"{self.name}: bestmove {best} without an evaluation")
                return Thought(best, [lines[i] for i in sorted(lines)], nodes)

    def _finish_search(self) -> None:
        """After an error line the engine still plays a move: read up to it, so the next position starts
        clean (a failure to do so is the caller's next EngineFailure)."""
        with contextlib.suppress(EngineFailure):
            while not self._read(10.0).startswith("bestmove"):
                pass


def engine_spec(model: Path | None, multipv: int, options: dict[str, str]) -> EngineSpec:
    """Our engine for analysis: no opening book (a book move has no evaluation), `multipv` lines, the
    model given (else the engine's default), then the user's options."""
    settings = {"USI_OwnBook": "false", "MultiPV": str(multipv)}
    if model is not None:
        settings["DNN_Model"] = str(model.resolve())
    return EngineSpec(shlex.quote(str(ENGINE)), {**settings, **options})
