"""The loop's evaluation games as Ray tasks: a match's games fan out over the cluster's nodes while the
self-play actors play, instead of running on the driver.

A match's games are dealt to tasks in whole pairs (games 2k and 2k+1 share opening k, colours
swapped), each task one CPU. A task starts the two engines on its node, the models they play written
there from Ray's object store (no shared filesystem), and plays its games exactly as `play_match` would
(`play_game`, the same openings, colours and limits). The driver gathers the games in match order and
writes their CSA files itself, so the result, its W/L/D accounting and the records are the local
step's. A task lost with its node is run again by Ray (its games, none of them counted yet, replayed).
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.match.arbiter import Game, MatchResult, play_game, write_csa
from engine.match.openings import Opening, game_opening
from engine.usi_client import EngineSpec, GoLimit, started
from train.loop.config import LoopConfig
from train.loop.steps import EvalMatch, Interrupted, MatchPlayer

MODEL_OPTION = "DNN_Model"
WAIT_S = 1.0  # how often the driver looks at the stop event while the tasks play
TASK_RETRIES = 3  # a task whose node leaves is run again


def play_games(
    specs: Sequence[EngineSpec],
    models: dict[str, Any],
    numbers: Sequence[int],
    openings: Sequence[Opening],
    limits: Sequence[GoLimit],
    max_moves: int,
    timeout: float,
) -> tuple[list[str], list[Game]]:
    """A task, on some node: the engines' names and the match's games `numbers`, played by one pair of
    engines whose models (`models`: the driver's path -> object ref of its bytes) are written here."""
    import ray

    with tempfile.TemporaryDirectory(prefix="gumbel-shogi-eval-") as tmp:
        local = []
        for i, spec in enumerate(specs):
            model = spec.options.get(MODEL_OPTION)
            if model in models:
                path = Path(tmp) / f"{i}-{Path(model).name}"
                path.write_bytes(ray.get(models[model]))
                spec = dataclasses.replace(spec, options={**spec.options, MODEL_OPTION: str(path)})
            local.append(spec)
        with started(local, timeout) as pair:
            games = [
                play_game(pair, game_opening(openings, i, True), i % 2, limits, max_moves, number=i)
                for i in numbers
            ]
            return [e.name for e in pair], games


def deal(games: int, tasks: int) -> list[list[int]]:
    """Game numbers 0..games-1 in whole pairs, dealt in turn to at most `tasks` tasks."""
    pairs = (games + 1) // 2
    n = max(1, min(tasks, pairs))
    return [[i for i in range(games) if (i // 2) % n == t] for t in range(n)]


def ray_matches(ray: Any, cfg: LoopConfig, stop: threading.Event) -> MatchPlayer:
    """A `MatchPlayer` whose games are Ray tasks, one CPU each, as many as the cluster has CPUs."""
    task = ray.remote(play_games).options(num_cpus=1, max_retries=TASK_RETRIES)

    def play(match: EvalMatch) -> MatchResult:
        specs = [match.me, match.other]
        paths = {s.options[MODEL_OPTION] for s in specs if MODEL_OPTION in s.options}
        models = {p: ray.put(Path(p).read_bytes()) for p in paths}
        chunks = deal(cfg.eval_games, int(ray.cluster_resources().get("CPU", 1)))
        args = (match.openings, match.limits, cfg.eval_max_moves, cfg.eval_timeout)
        refs = [task.remote(specs, models, chunk, *args) for chunk in chunks]
        pending = list(refs)
        while pending:
            if stop.is_set():
                for ref in pending:
                    ray.cancel(ref, force=True)
                who = match.other.label
                raise Interrupted(f"evaluation vs {who} stopped; a rerun plays that match again")
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
        try:
            answers = ray.get(refs)
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, UserError):  # an engine that cannot start: its one line, as here
                raise e.cause from None
            raise
        result = MatchResult(tuple(answers[0][0]))
        result.games = sorted((game for _, games in answers for game in games), key=lambda x: x.number)
        for game in result.games:
            write_csa(match.csa_dir / f"game-{game.number + 1:04d}.csa", game, result.names)
        return result

    return play
