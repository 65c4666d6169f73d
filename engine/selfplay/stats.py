"""What a self-play run reports: games, results, positions, network calls, speed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from engine.core.rules import BLACK_WIN, DRAW, RESULT_MASK, WHITE_WIN
from engine.records.formats import OPPONENT_SELFPLAY, OPPONENT_USI_BLACK


@dataclass
class SelfPlayStats:
    games: int = 0
    positions: int = 0
    black_wins: int = 0
    white_wins: int = 0
    draws: int = 0
    resigned: int = 0
    playout_games: int = 0  # games kept playing past a resignable position (to measure false resigns)
    false_resigns: int = 0  # ... of which the side that would have resigned did not lose
    nn_positions: int = 0
    nn_batches: int = 0
    cache_hits: int = 0
    usi_games: int = 0  # games against the USI engine, and their outcome for us:
    usi_wins: int = 0
    usi_losses: int = 0
    usi_draws: int = 0
    dropped: int = 0  # games given up because the engine crashed or timed out
    workers_lost: int = 0  # worker processes that died (their finished games are counted and kept)
    server_calls: int = 0  # inference server: forward calls, and seconds its evaluator was busy
    server_busy: float = 0.0
    servers: list[dict] = field(default_factory=list)  # per inference server: device, rows, calls, busy
    seconds: float = 0.0
    interrupted: bool = False
    files: list[str] = field(default_factory=list)

    def add_game(self, length: int, result: int | None, opponent: int = OPPONENT_SELFPLAY) -> None:
        """Count a finished game (`length` positions recorded); result None: a dropped game."""
        if result is None:
            self.dropped += 1
            return
        self.games += 1
        self.positions += length
        winner = result & RESULT_MASK
        if winner == DRAW:
            self.draws += 1
        elif winner == BLACK_WIN:
            self.black_wins += 1
        else:
            self.white_wins += 1
        if opponent != OPPONENT_SELFPLAY:
            self.usi_games += 1
            engine_wins = BLACK_WIN if opponent == OPPONENT_USI_BLACK else WHITE_WIN
            if winner == DRAW:
                self.usi_draws += 1
            elif winner == engine_wins:
                self.usi_losses += 1
            else:
                self.usi_wins += 1

    @property
    def usi_wld(self) -> str:
        return f"{self.usi_wins}/{self.usi_losses}/{self.usi_draws}"

    def merge(self, other: SelfPlayStats) -> None:
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "seconds":
                self.seconds = max(mine, theirs)
            elif isinstance(mine, bool):
                setattr(self, f.name, mine or theirs)
            else:
                setattr(self, f.name, mine + theirs)

    @property
    def pos_per_s(self) -> float:
        return self.positions / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_length(self) -> float:
        return self.positions / self.games if self.games else 0.0

    def _server(self, s: dict) -> str:
        busy = 100 * s["busy"] / max(self.seconds, 1e-9)
        per_call = s["rows"] / max(s["calls"], 1)
        return f"{s['device']} {s['rows']} rows in {s['calls']} calls ({per_call:.0f}/call, busy {busy:.0f}%)"

    def summary(self) -> str:
        line = (
            f"{self.games} games, {self.positions} positions in {self.seconds:.1f}s "
            f"({self.pos_per_s:.1f} pos/s), mean length {self.mean_length:.1f}, "
            f"B/W/D {self.black_wins}/{self.white_wins}/{self.draws}"
        )
        if self.resigned or self.playout_games:
            line += f", resigned {self.resigned}, false resigns {self.false_resigns}/{self.playout_games}"
        if self.usi_games or self.dropped:
            line += f", vs USI engine {self.usi_games} games W/L/D {self.usi_wld}"
        if self.dropped:
            line += f", {self.dropped} dropped (engine crash or timeout)"
        if len(self.servers) > 1:
            line += ", inference servers " + "; ".join(self._server(s) for s in self.servers)
        elif self.server_calls:
            line += (
                f", inference server {self.nn_positions / self.server_calls:.0f} rows/call, "
                f"busy {100 * self.server_busy / max(self.seconds, 1e-9):.0f}%"
            )
        if self.workers_lost:
            line += f", {self.workers_lost} worker process(es) died"
        if self.interrupted:
            line += " (interrupted: unfinished games dropped)"
        return line + "".join(f"\n  wrote {f}" for f in self.files)
