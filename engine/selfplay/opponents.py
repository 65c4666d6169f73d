"""External USI engines as self-play opponents (as dlshogi's self-play, and how a run bootstraps from
an existing engine): a `usi_fraction` of the games, the engine playing the colour `usi_colour` says.
The engine's moves are asked of a pool of `usi_engines` processes in background threads and recorded
without a policy target (hcpe3 candidateNum 0, eval from its `score`); `bestmove resign` and an
illegal move lose, `bestmove win` wins only if the position is a nyugyoku. A crash or timeout drops
that game (with a warning) and the engine is restarted.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import cshogi

from engine.records.formats import OPPONENT_SELFPLAY, OPPONENT_USI_BLACK, OPPONENT_USI_WHITE
from engine.selfplay.config import SelfPlayConfig
from engine.usi_client import EngineFailure, EngineSpec, UsiProcess

OPPONENT_OF = {None: OPPONENT_SELFPLAY, cshogi.BLACK: OPPONENT_USI_BLACK, cshogi.WHITE: OPPONENT_USI_WHITE}


def engine_colour(index: int, config: SelfPlayConfig) -> int | None:
    """The colour the USI engine plays in game `index`, or None for a self-play game. The external
    games are spread evenly over the indices (game i is one when floor((i+1)f) > floor(i f)), and
    'alternate' alternates over them, so every split of the indices between processes agrees."""
    if not config.external:
        return None
    f = config.usi_fraction
    before = int(index * f)
    if int((index + 1) * f) == before:
        return None
    if config.usi_colour == "alternate":
        return cshogi.BLACK if before % 2 == 0 else cshogi.WHITE
    return cshogi.BLACK if config.usi_colour == "black" else cshogi.WHITE


@dataclass
class EngineReply:
    bestmove: str | None  # None: the engine crashed or timed out (`error` says how)
    score: str | None = None  # the last `info ... score` it sent ("cp N" / "mate N")
    error: str = ""


@dataclass
class _Seat:
    engine: UsiProcess
    game: int | None = None  # the game whose moves it was last asked for


class UsiOpponents:
    """A pool of external USI engine processes. `ask` returns at once; a background thread (one per
    engine: `go` waits on the engine's pipe without holding the GIL) sends the position to a free
    engine, with `usinewgame` when it last served another game. A crash or timeout comes back as a
    failed reply and the engine is restarted on its next use; a failed start is a UserError."""

    def __init__(self, config: SelfPlayConfig) -> None:
        assert config.usi_engine is not None
        self.byoyomi, self.nodes = config.usi_byoyomi, config.usi_nodes
        spec = EngineSpec(config.usi_engine, dict(config.usi_options))
        self._seats = [_Seat(UsiProcess(spec, config.usi_timeout)) for _ in range(config.usi_engines)]
        self._idle: queue.SimpleQueue[_Seat] = queue.SimpleQueue()
        self._busy: set[int] = set()
        self._pool = ThreadPoolExecutor(len(self._seats), thread_name_prefix="usi-engine")
        try:
            for _ in self._pool.map(lambda seat: seat.engine.connect(), self._seats):
                pass
        except BaseException:
            self.close()
            raise
        for seat in self._seats:
            self._idle.put(seat)
        self.name = self._seats[0].engine.name

    def ask(self, game: int, moves: list[str]) -> Future[EngineReply]:
        """The engine's move after `moves` (USI, from the start position) in game number `game`."""
        return self._pool.submit(self._ask, game, list(moves))

    def _ask(self, game: int, moves: list[str]) -> EngineReply:
        seat = self._idle.get()
        self._busy.add(id(seat))
        engine = seat.engine
        try:
            if engine.proc is None:
                engine.connect()
            if seat.game != game:
                engine.usinewgame()
                seat.game = game
            engine.position(moves)
            bestmove, _ = engine.go(byoyomi=self.byoyomi, nodes=self.nodes)
            return EngineReply(bestmove, engine.last_score)
        except EngineFailure as e:
            engine.close()
            seat.game = None
            return EngineReply(None, error=str(e))
        finally:
            self._busy.discard(id(seat))
            self._idle.put(seat)

    def close(self) -> None:
        """Cancel queued requests, stop searches in progress, quit every engine."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for seat in self._seats:
            if id(seat) in self._busy:
                with suppress(EngineFailure, AttributeError):
                    seat.engine._send("stop")
        for seat in self._seats:
            seat.engine.close()
        self._pool.shutdown(wait=True)


@contextmanager
def usi_opponents(config: SelfPlayConfig) -> Iterator[UsiOpponents | None]:
    if not config.external:
        yield None
        return
    opponents = UsiOpponents(config)
    try:
        yield opponents
    finally:
        opponents.close()
