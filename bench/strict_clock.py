#!/usr/bin/env python3
"""Does bin/usi_engine keep its time under a strict clock? Short games against bin/greedy_usi under
byoyomi 300 ms, sudden death 3 s and Fischer 2 s + 0.5 s, with CPU-burning processes beside them
(the "other engine busy" of a 2-core tournament machine). The arbiter forgives nothing: the time of a
move is the wall time from writing `go` to reading `bestmove`, and a move over what the clock offered
(time left + byoyomi; a Fischer increment is added only after the move) loses on time.

Prints, per time control, the engine's largest time used against what was allowed for that move.
Usage: bench/strict_clock.py [--games N] [--plies N] [--burn N] [--model PATH] [--backend B]"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402

from engine.core.rules import game_terminal  # noqa: E402

BIN = Path(__file__).resolve().parent.parent / "bin"
SILENT_S = 30.0  # an engine silent this long after its deadline has hung


@dataclass(frozen=True)
class TimeControl:
    name: str
    main_ms: int
    byoyomi_ms: int = 0
    increment_ms: int = 0

    def go(self, btime: int, wtime: int) -> str:
        if self.byoyomi_ms:
            return f"go btime {btime} wtime {wtime} byoyomi {self.byoyomi_ms}"
        if self.increment_ms:
            return f"go btime {btime} wtime {wtime} binc {self.increment_ms} winc {self.increment_ms}"
        return f"go btime {btime} wtime {wtime}"


CONTROLS = [
    TimeControl("byoyomi 300 ms", 0, byoyomi_ms=300),
    TimeControl("sudden death 3 s", 3000),
    TimeControl("Fischer 2 s + 0.5 s", 2000, increment_ms=500),
]


class Player:
    """A USI engine process; stdout lines are timestamped by a reader thread as they arrive."""

    def __init__(self, argv: list[str], options: dict[str, str]) -> None:
        pipe = subprocess.PIPE
        self.proc = subprocess.Popen(argv, stdin=pipe, stdout=pipe, text=True, bufsize=1)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.send("usi")
        self.wait_for("usiok", 60)
        for name, value in options.items():
            self.send(f"setoption name {name} value {value}")
        self.send("isready")
        self.wait_for("readyok", 300)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), line.strip()))
        self.lines.put((time.monotonic(), ""))

    def send(self, line: str) -> float:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return time.monotonic()

    def wait_for(self, prefix: str, timeout: float) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise RuntimeError(f"no {prefix!r} within {timeout:.0f} s") from None
            if not line:
                raise RuntimeError(f"engine exited waiting for {prefix!r}")
            if line.startswith(prefix):
                return at, line

    def close(self) -> None:
        try:
            self.send("quit")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


@dataclass
class Report:
    moves: int = 0
    overruns: int = 0
    worst: tuple[float, float] = (0.0, 1.0)  # (used, allowed) ms of the move closest to its limit
    max_used: float = 0.0
    results: list[str] = field(default_factory=list)

    def add(self, used: float, allowed: float) -> None:
        self.moves += 1
        self.overruns += used > allowed
        self.max_used = max(self.max_used, used)
        if used / allowed > self.worst[0] / self.worst[1]:
            self.worst = (used, allowed)


def play(
    engine: Player, greedy: Player, tc: TimeControl, engine_black: bool, plies: int, report: Report
) -> None:
    """One game; only the engine's moves are timed (the greedy player answers at once)."""
    board = cshogi.Board()
    moves: list[str] = []
    left = {cshogi.BLACK: tc.main_ms, cshogi.WHITE: tc.main_ms}
    occurrences = {board.zobrist_hash(): 1}
    for p in (engine, greedy):
        p.send("usinewgame")
    result = "max plies"
    while len(moves) < plies:
        mover_is_engine = (board.turn == cshogi.BLACK) == engine_black
        player = engine if mover_is_engine else greedy
        player.send("position startpos" + (" moves " + " ".join(moves) if moves else ""))
        allowed = left[board.turn] + tc.byoyomi_ms
        sent = player.send(tc.go(left[cshogi.BLACK], left[cshogi.WHITE]))
        at, line = player.wait_for("bestmove", allowed / 1000 + SILENT_S)
        used = (at - sent) * 1000
        if mover_is_engine:
            report.add(used, allowed)
        if used > allowed:
            result = f"{'engine' if mover_is_engine else 'greedy'} lost on time ({used:.0f} > {allowed} ms)"
            break
        if not tc.byoyomi_ms:  # byoyomi here has no main time: it stays 0
            left[board.turn] = max(left[board.turn] - int(used), 0) + tc.increment_ms
        move = line.split()[1]
        if move in ("resign", "win"):
            result = f"{'engine' if mover_is_engine else 'greedy'} {move}"
            break
        board.push_usi(move)
        moves.append(move)
        occurrences[board.zobrist_hash()] = occurrences.get(board.zobrist_hash(), 0) + 1
        if (end := game_terminal(board, occurrences, max_moves=None)) is not None:
            winner = "engine" if (end.winner == cshogi.BLACK) == engine_black else "greedy"
            result = "draw" if end.winner is None else f"{winner} won"
            break
    report.results.append(f"{result} after {len(moves)} plies")
    for p in (engine, greedy):
        p.send("gameover draw")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=2, help="games per time control (colours alternate)")
    ap.add_argument("--plies", type=int, default=120, help="a game ends undecided after this many plies")
    ap.add_argument("--burn", type=int, default=1, help="CPU-burning processes beside the game")
    ap.add_argument("--model", default=None, help="DNN_Model (default: the engine's default)")
    ap.add_argument("--backend", default=None, help="Backend option (default: auto)")
    args = ap.parse_args()
    options = {k: v for k, v in (("DNN_Model", args.model), ("Backend", args.backend)) if v}
    options["USI_OwnBook"] = "false"  # book moves take no time: every move must be searched
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burn)]
    engine = greedy = None
    try:
        engine = Player([str(BIN / "usi_engine")], options)
        greedy = Player([str(BIN / "greedy_usi")], {})
        print(f"{os.cpu_count()} cores, {args.burn} CPU burner(s) beside the game")
        failed = False
        for tc in CONTROLS:
            report = Report()
            for g in range(args.games):
                play(engine, greedy, tc, g % 2 == 0, args.plies, report)
            used, allowed = report.worst
            failed |= report.overruns > 0
            print(
                f"{tc.name:22} {report.moves:4} engine moves, max used {report.max_used:6.0f} ms;"
                f" closest to the limit {used:.0f} of {allowed:.0f} ms; over the limit: {report.overruns}"
                f"  [{'; '.join(report.results)}]",
                flush=True,
            )
        return 1 if failed else 0
    finally:
        for p in (engine, greedy):
            if p is not None:
                p.close()
        for b in burners:
            b.kill()
            b.wait()


if __name__ == "__main__":
    raise SystemExit(main())
