"""Gumbel AlphaZero self-play in one process: many games advanced together, one batched network call
per step.

The process's `parallel` games are split into `groups`. A group's searches advance in lockstep
(`engine.search.gumbel_tree.SearchGroup`): each step backs up the last network call, plays the moves
of the searches that ended, starts the next ones and walks every search's next simulations into the
group's leaf batch, which goes to the evaluator (`Evaluator.submit`: asynchronous for a GPU or the
inference server, a background thread for a CPU runtime that releases the GIL) while the other group
takes its step. With one group, tree walking and inference take turns. With playout-cap randomisation
(`full_fraction` < 1) each group has a second SearchGroup, of fast searches, on the same leaf batch: a
game's move goes to one or the other, drawn from its own RNG. Finished games go to a
background writer (`engine.selfplay.writer`); on a stop, every finished game is written and the
unfinished ones are dropped. Games against an external USI engine (`engine.selfplay.opponents`) wait
for its reply while the other games go on. `engine.selfplay.processes` runs this in worker processes.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

import cshogi
import numpy as np
from tqdm import tqdm

from engine.backends.evaluator import Evaluator, Pending
from engine.core.rules import RESULT_MASK, terminal, win_for
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import GumbelResult, LeafBatch
from engine.search.gumbel_tree import SearchGroup
from engine.selfplay.config import OnGame, SelfPlayConfig
from engine.selfplay.game import Game
from engine.selfplay.opponents import UsiOpponents, usi_opponents
from engine.selfplay.stats import SelfPlayStats
from engine.selfplay.writer import GameWriter, OnRecord, RecordSink, output_path


def warn(message: str) -> None:
    tqdm.write(f"selfplay: warning: {message}", file=sys.stderr)


def group_sizes(config: SelfPlayConfig, games: int) -> list[int]:
    """The games in flight in each group of a process that plays `games` games."""
    parallel = min(config.parallel, games)
    groups = min(config.groups, parallel)
    return [parallel // groups + (g < parallel % groups) for g in range(groups)]


def leaf_rows(config: SelfPlayConfig, games: int) -> int:
    """The most rows one group's network call can have (each game's leaves of one round)."""
    return max(group_sizes(config, games), default=0) * (config.considered + 1)


@dataclass
class _Group:
    """Games that share one leaf batch (one network call per step) and its evaluator."""

    batch: LeafBatch
    searches: list[SearchGroup]  # the full search; with playout-cap randomisation the fast one too
    slots: list[Game | None]
    evaluator: Evaluator
    pending: Pending | None = None  # the batch's submitted network call

    def ended(self) -> dict[int, GumbelResult]:
        """Slot -> result of the searches that are over (a slot is in one search at a time)."""
        return {i: r for search in self.searches for i, r in search.ended()}


class _Runner:
    """Self-play in this process for the game indices in `indices`."""

    def __init__(
        self,
        config: SelfPlayConfig,
        evaluators: list[Evaluator],
        writer: GameWriter | RecordSink,
        indices: Sequence[int],
        on_game: OnGame,
        stop: threading.Event,
        opponents: UsiOpponents | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self.on_game = on_game
        self.stop = stop
        self.opponents = opponents
        self.stats = SelfPlayStats(files=[str(writer.path)] if writer.path else [])
        self._indices = iter(indices)
        self.cache = EvalCache(config.cache_size)
        params = [config.search_params(fast) for fast in ((False, True) if config.capped else (False,))]
        self.groups = []
        for g, slots in enumerate(group_sizes(config, len(indices))):
            evaluator = evaluators[g % len(evaluators)]
            rows = slots * (config.considered + 1)
            batch = LeafBatch(rows, evaluator.input2, evaluator.input_buffers(rows))
            searches = [SearchGroup(p, self.cache, batch, slots) for p in params]
            self.groups.append(_Group(batch, searches, [None] * slots, evaluator))

    def _finish(self, game: Game, result: int) -> None:
        game.record.result = result
        self.writer.put(game.record)
        positions = len(game.record) if self.config.format == "hcpe3" else game.record.targets
        self.stats.add_game(positions, result, game.record.opponent)
        if game.would_resign is not None:
            self.stats.playout_games += 1
            loss = win_for(cshogi.opponent(game.would_resign)).result
            self.stats.false_resigns += (result & RESULT_MASK) != loss
        self.on_game(positions, result, game.record.opponent)

    def _drop(self, game: Game, error: str) -> None:
        if not self.stop.is_set():  # on Ctrl-C the engines get the signal too: no news
            warn(f"game {game.index} dropped after {len(game.record)} moves: {error}; restarting the engine")
        self.stats.add_game(0, None, game.record.opponent)
        self.on_game(0, None, game.record.opponent)

    def _engine_move(self, game: Game) -> bool:
        """Apply the engine's finished reply; True if that ended (or dropped) the game."""
        assert game.reply is not None
        reply, game.reply = game.reply.result(), None
        if reply.bestmove is None:
            self._drop(game, reply.error)
            return True
        result = game.play_engine(reply)
        if result is not None:
            self._finish(game, result)
            return True
        return False

    def _advance(self, group: _Group, i: int, result: GumbelResult | None) -> None:
        """Play slot i's search `result` (if its search ended), then run the slot's game(s) until a
        search waits on the network, an engine thinks, or no game is left to start."""
        config = self.config
        while True:
            game = group.slots[i]
            if result is not None:
                assert game is not None
                resigned, result = game.play(result, config), None
                if resigned is not None:
                    self.stats.resigned += 1
                    self._finish(game, resigned)
                    group.slots[i] = None
                continue
            if game is None:
                index = next(self._indices, None)
                if index is None:
                    return
                game = group.slots[i] = Game(index, config)
            if game.reply is not None:
                if not game.reply.done():
                    return
                if self._engine_move(game):
                    group.slots[i] = None
                    continue
            if game.searching:
                return
            end = terminal(game.board, config.max_moves)
            if end is not None:
                self._finish(game, end.result)
                group.slots[i] = None
                continue
            if game.engine_to_move:
                assert self.opponents is not None
                game.reply = self.opponents.ask(game.index, game.usi_moves)
                return
            game.full = not config.capped or game.rng.random() < config.full_fraction
            result = group.searches[0 if game.full else 1].start(i, game.board, game.rng)
            game.searching = result is None

    def _round(self, group: _Group) -> None:
        """One step of the group: back up the evaluated batch, play the moves of the searches that
        ended and start the next ones, then walk every search's next simulations into the batch
        (again at once for searches whose round needed no network call)."""
        group.batch.clear()
        for search in group.searches:
            search.resolve()
        while True:
            ended = group.ended()
            for i in range(len(group.slots)):
                result = ended.get(i)
                if result is not None:
                    group.slots[i].searching = False
                self._advance(group, i, result)
            if not any([search.descend() for search in group.searches]):  # a list: every search descends
                return

    @staticmethod
    def _submit(pool: ThreadPoolExecutor, evaluator: Evaluator, x1: np.ndarray, x2: np.ndarray) -> Pending:
        """Start the batch's network call: in the pool's thread for a blocking runtime that overlaps,
        so that the other group walks its trees meanwhile; otherwise through the evaluator's own
        `submit` (asynchronous, or at once for one with nothing to overlap)."""
        if evaluator.overlaps:
            return pool.submit(evaluator.evaluate_features, x1, x2).result
        return evaluator.submit(x1, x2)

    def run(self) -> SelfPlayStats:
        start = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="selfplay-eval") as pool:
            while True:
                busy = False
                for group in self.groups:
                    if group.pending is not None:
                        group.batch.policy, group.batch.value = group.pending()
                        group.pending = None
                    if self.stop.is_set():
                        continue
                    self._round(group)
                    n = group.batch.n
                    if n:
                        x1, x2 = group.batch.x1[:n], group.batch.x2[:n]
                        group.pending = self._submit(pool, group.evaluator, x1, x2)
                        self.stats.nn_positions += n
                        self.stats.nn_batches += 1
                        busy = True
                if not busy and all(g.pending is None for g in self.groups):
                    replies = [s.reply for g in self.groups for s in g.slots if s is not None and s.reply]
                    if not replies or self.stop.is_set():
                        break
                    wait(replies, timeout=0.5, return_when=FIRST_COMPLETED)  # only engines are busy
        self.stats.interrupted = self.stop.is_set() and any(
            s is not None for g in self.groups for s in g.slots
        )
        self.stats.cache_hits = self.cache.hits
        self.stats.seconds = time.perf_counter() - start
        return self.stats


def progress_bar(config: SelfPlayConfig) -> tqdm:
    return tqdm(total=config.games, unit="game", disable=not config.progress, dynamic_ncols=True)


def show_progress(bar: tqdm, stats: SelfPlayStats, start: float) -> None:
    rate = stats.positions / max(time.perf_counter() - start, 1e-9)
    text = (
        f"pos {stats.positions} ({rate:.1f}/s) len {stats.mean_length:.0f} "
        f"B/W/D {stats.black_wins}/{stats.white_wins}/{stats.draws}"
    )
    if stats.usi_games or stats.dropped:
        text += f" vs USI W/L/D {stats.usi_wld}" + (f" dropped {stats.dropped}" if stats.dropped else "")
    bar.set_postfix_str(text, refresh=False)
    bar.update(1)


def _threads(config: SelfPlayConfig) -> int:
    return config.threads or max(1, (os.cpu_count() or 1) // config.processes)


def make_evaluator(
    config: SelfPlayConfig,
    log: Callable[[str], None] | None = None,
    max_batch: int | None = None,
    threads: int | None = None,
) -> Evaluator:
    """The configured evaluator, its CPU threads limited so that worker processes do not oversubscribe."""
    import torch

    from engine.backends.choose import create_evaluator

    threads = threads or _threads(config)
    torch.set_num_threads(threads)
    kwargs = {"log": log} if log is not None else {}
    return create_evaluator(
        config.model,
        config.backend,
        max_batch or config.batch,
        config.device,
        threads=threads,
        activation=config.activation,
        int8=config.int8,
        **kwargs,
    )


def run_here(
    config: SelfPlayConfig,
    evaluators: list[Evaluator] | None,
    indices: Sequence[int],
    on_game: OnGame,
    stop: threading.Event,
    tag: str = "",
    log: Callable[[str], None] | None = None,
    ready: Callable[[], None] | None = None,
    on_record: OnRecord | None = None,
) -> SelfPlayStats:
    """Play the games `indices` here; the USI engines start before the evaluator (or a TensorRT build)
    and the output file, so an engine that cannot start fails fast and leaves no file behind. `ready` is
    called once all that is set up, before the first move (the caller's progress bar starts then).
    With `on_record`, finished games go to it (whole, hcpe3-encoded) instead of a file."""
    with usi_opponents(config) as opponents:
        if evaluators is None:
            evaluators = [make_evaluator(config, log)]
        writer: GameWriter | RecordSink
        if on_record is not None:
            writer = RecordSink(on_record)
        else:
            writer = GameWriter(output_path(config.out_dir, config.format, tag), config.format)
        try:
            if ready is not None:
                ready()
            stats = _Runner(config, evaluators, writer, indices, on_game, stop, opponents).run()
        finally:
            writer.close()
    return stats
