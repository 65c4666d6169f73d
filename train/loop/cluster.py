"""The learning loop on a Ray cluster: self-play never waits for training.

The actors (`engine.selfplay.cluster`) play without pause. Generation g's self-play step only fills
its folder up to its target; while g then trains and exports on the driver (and is evaluated, its
games Ray tasks on the nodes: `cluster_eval`), the actors go on with the newest published model and
their games fill the next generations' folders (each game's manifest line names the model that played
it, `genN`). With --max-model-age A, each model's games go to files of their own, folder k takes only
games of models k-A..k-1 (older ones are dropped) and generation g trains only on files of models
g-A..g-1. Once g is exported it is published and the actors' next units play it. The driver is the
only writer; state.json and every step resume as in the local loop, and a rerun plays only what the
folders miss. The share of wall time the actors were playing is logged after every generation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engine.selfplay.cluster import ClusterSelfPlay, IdSource, Target
from engine.selfplay.run_folder import RunWriter, read_done
from train.loop.cluster_eval import ray_matches
from train.loop.config import LoopConfig, LoopState, RunPaths, at_generation, selfplay_config
from train.loop.run import all_rows, open_run, record_generation
from train.loop.steps import Interrupted, count_games, play_model, step_eval, step_export, step_train


def _latest_model(state: LoopState, generations: int) -> int:
    """The newest generation whose model is exported (0: the initial one)."""
    return max((g for g in range(generations + 1) if state.done(g, "export")), default=0)


def _next_id(paths: RunPaths, generations: int) -> int:
    """Game ids run on across generations and reruns: one past the largest written."""
    ids = [r["id"] for g in range(1, generations + 1) for r in read_done(paths.selfplay(g)).rows]
    return max(ids, default=-1) + 1


class ClusterLoop:
    """One run of the loop on a cluster (until it ends or stops): its actors, the id count and the folders
    being filled."""

    def __init__(
        self, cfg: LoopConfig, paths: RunPaths, state: LoopState, log: Callable[[str], None]
    ) -> None:
        self.cfg, self.paths, self.state, self.log = cfg, paths, state, log
        template = selfplay_config(cfg, 1, paths.selfplay(1), play_model(paths, 0))
        self.pool = ClusterSelfPlay(template, cfg.ray, prog="loop", unit_games=self._unit(template))
        self.source = IdSource(start=_next_id(paths, cfg.generations))
        self.model = -1
        self.writers: dict[int, RunWriter] = {}  # one file per folder and run, open until the end
        self.share: float | None = None  # utilisation once the last folder was full (then no work is left)

    @staticmethod
    def _unit(template: Any) -> int:
        """Games per unit: enough that an actor's start-up of a unit is small against its play."""
        return max(4, 2 * template.parallel * template.processes)

    def publish(self, g: int) -> None:
        if g != self.model:
            self.pool.publish(play_model(self.paths, g), label=f"gen{g}")
            self.model = g
            self.log(f"self-play actors now play gen {g}'s model")

    def targets(self, first: int) -> list[Target]:
        """Generations first.. whose folders still want games, in order."""
        out = []
        games = self.cfg.schedules()["games"]
        for k in range(first, self.cfg.generations + 1):
            if self.state.done(k, "selfplay"):
                continue
            folder = self.paths.selfplay(k)
            writer = self.writers.setdefault(k, RunWriter(folder, by_model=bool(self.cfg.max_model_age)))
            had = read_done(folder).games - writer.games  # this run's file counts through its writer
            out.append(Target(folder, at_generation(games, k), had, writer, self._young(k)))
        return out

    def _young(self, k: int) -> frozenset[str] | None:
        """With --max-model-age A, folder k takes only games generation k may train on (models k-A..k-1):
        an actor's game of an older model is dropped rather than fill a place a younger one needs."""
        age = self.cfg.max_model_age
        return frozenset(f"gen{m}" for m in range(max(k - age, 0), k)) if age else None

    def close_writers(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers = {}

    def selfplay(self, g: int, stop: threading.Event) -> dict[str, Any]:
        """Fill generation g's folder (most of it was filled while g - 1 trained)."""
        started = time.perf_counter()
        (target,) = self.targets(g)[:1]
        before = target.had + target.writer.games
        if not target.full:
            self.log(f"gen {g}: self-play {target.games - before} more games on the cluster")
            self.pool.collect([target], self.source, stop)
        if stop.is_set():
            raise Interrupted(f"gen {g}: self-play interrupted; every finished game kept")
        games, positions = count_games(self.paths.selfplay(g))
        models: dict[str, int] = {}
        for row in read_done(self.paths.selfplay(g)).rows:
            models[row["model"]] = models.get(row["model"], 0) + 1
        return {
            "games": games,
            "positions": positions,
            "games_this_session": games - before,
            "models": models,
            "seconds": time.perf_counter() - started,
        }

    def while_playing(self, g: int, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a step here while the actors fill the folders of the generations after g."""
        with self.pool.background(self.targets(g + 1), self.source):
            return work()

    def utilisation(self) -> float:
        """The actors' share of wall time spent playing, up to when the run needed no more games."""
        if self.share is None and self.state.done(self.cfg.generations, "selfplay"):
            self.share = self.pool.utilisation()
        return self.share if self.share is not None else self.pool.utilisation()

    def close(self) -> None:
        try:
            self.pool.stop_actors(self.targets(1) if self.pool.slots else [])
        finally:
            self.close_writers()
            self.pool.close()


def run_cluster_loop(
    cfg: LoopConfig, log: Callable[[str], None], on_step: Callable[[int, str], None] | None = None
) -> list[dict[str, Any]]:
    """The loop with self-play on the Ray cluster at `cfg.ray` (`train.loop.main.run_loop` picks it)."""
    from engine.selfplay.processes import stop_on_signals

    cfg, paths, state = open_run(cfg, log)
    loop = ClusterLoop(cfg, paths, state, log)
    stop = threading.Event()
    eval_on_ray = ray_matches(loop.pool.ray, cfg, stop)  # evaluation games are tasks on the cluster too
    try:
        loop.publish(_latest_model(state, cfg.generations))
        with stop_on_signals(stop):
            for g in range(1, cfg.generations + 1):
                if not state.done(g, "selfplay"):
                    state.finish(g, "selfplay", loop.selfplay(g, stop))
                    loop.utilisation()  # taken when the last generation's games are in
                    _stepped(on_step, g, "selfplay")
                for step in ("train", "export", "eval"):
                    if state.done(g, step):
                        continue
                    run = {
                        "train": lambda g=g: step_train(cfg, paths, g, log),
                        "export": lambda g=g: step_export(cfg, paths, g, log),
                        "eval": lambda g=g: step_eval(cfg, paths, g, state, log, eval_on_ray),
                    }[step]
                    state.finish(g, step, loop.while_playing(g, run))
                    _stepped(on_step, g, step)
                    if step == "export":
                        loop.publish(g)
                    if stop.is_set():
                        raise Interrupted(f"gen {g}: stopped after {step}")
                share = loop.utilisation()
                state.gen(g)["selfplay_utilisation"] = share
                state.save()
                log(f"gen {g}: self-play utilisation {100 * share:.0f}% (the actors' share of wall time)")
                record_generation(paths, state, g, log)
        share = loop.utilisation()
    finally:
        loop.close()
    log(f"self-play utilisation over the run: {100 * share:.0f}% (the actors' share of wall time)")
    return all_rows(paths)


def _stepped(on_step: Callable[[int, str], None] | None, g: int, step: str) -> None:
    if on_step is not None:
        on_step(g, step)
