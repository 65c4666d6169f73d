"""The four steps of a generation (self-play, train, export, evaluate), each resumable from what it left."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.match.arbiter import MatchResult, play_match
from engine.match.openings import Opening, random_openings
from engine.paths import REPO_ROOT
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.run_folder import manifest_path, read_manifest
from engine.usi_client import EngineSpec, GoLimit, UsiProcess, started
from train.loop.config import LoopConfig, LoopState, RunPaths, at_generation, selfplay_config

USI_ENGINE = REPO_ROOT / "bin" / "usi_engine"
GREEDY_ENGINE = REPO_ROOT / "bin" / "greedy_usi"
ENGINE = "engine"  # the opponents' key of --eval-engine


class Interrupted(KeyboardInterrupt):
    """A step stopped on SIGINT/SIGTERM after saving what it had; rerun the loop to continue."""


def count_games(folder: Path) -> tuple[int, int]:
    """(whole games, positions) in a folder's hcpe3 files; a torn last game is not counted."""
    games = positions = 0
    for f in sorted(folder.glob("*.hcpe3")):
        if f.stat().st_size == 0:
            continue
        for game in iter_hcpe3_games(f):
            games += 1
            positions += len(game.moves)
    return games, positions


def count_targets(path: Path) -> int:
    """Positions of an hcpe3 file that carry a policy target (what training reads of it)."""
    if path.stat().st_size == 0:
        return 0
    return sum(sum(len(c) > 0 for c in game.candidates) for game in iter_hcpe3_games(path))


def newest_by_positions(files: Sequence[Path], positions: int) -> list[Path]:
    """The newest of `files` (oldest first) that together hold at least `positions` targets (all of
    them if they hold fewer): a replay window by positions, whatever the games per file."""
    out: list[Path] = []
    total = 0
    for f in reversed(files):
        if total >= positions:
            break
        out.append(f)
        total += count_targets(f)
    return out[::-1]


def anchor_files(cfg: LoopConfig, g: int, selfplay_positions: int) -> list[Path]:
    """The --extra-data records generation g trains on. Without --extra-share: all of them, every
    generation. With it: the next files in turn (each generation goes on where the previous one
    stopped, wrapping round), enough for that share of the training positions."""
    if not cfg.extra_share:
        return cfg.extra_paths()
    files = [f for p in cfg.extra_paths() for f in (sorted(p.glob("*.hcpe3")) if p.is_dir() else [p])]
    if not files:
        raise UserError(f"--extra-share: no hcpe3 records in --extra-data {cfg.extra_data}")
    want = cfg.extra_share / (1.0 - cfg.extra_share) * selfplay_positions
    per_file = max(count_targets(files[0]), 1)
    take = min(max(1, round(want / per_file)), len(files))
    start = (g - 1) * take
    return [files[(start + i) % len(files)] for i in range(take)]


def play_model(paths: RunPaths, g: int) -> Path:
    """The file generation g's model is served from (ONNX; the runtime picks TensorRT where it can)."""
    return paths.onnx(g)


def best_before(cfg: LoopConfig, paths: RunPaths, g: int) -> int:
    """The generation whose model plays generation g's self-play, whose weights g trains from and
    whom g must beat: g - 1, or with --gate the newest generation accepted so far (0 always is)."""
    if not cfg.gate:
        return g - 1
    state = LoopState.load(paths.state, cfg.network)
    for k in range(g - 1, 0, -1):
        if state.generations.get(str(k), {}).get("eval", {}).get("accepted"):
            return k
    return 0


def step_selfplay(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    from engine.selfplay.processes import run_selfplay

    target = at_generation(cfg.schedules()["games"], g)
    folder = paths.selfplay(g)
    folder.mkdir(parents=True, exist_ok=True)
    before, _ = count_games(folder)
    started_at = time.perf_counter()
    if before < target:
        best = best_before(cfg, paths, g)
        log(f"gen {g}: self-play {target - before} games ({before} already played) with gen {best}'s model")
        stats = run_selfplay(selfplay_config(cfg, g, folder, play_model(paths, best), before))
        if stats.interrupted:
            raise Interrupted(f"gen {g}: self-play interrupted; {stats.games} more games kept")
    games, positions = count_games(folder)
    return {
        "games": games,
        "positions": positions,
        "games_this_session": games - before,
        "seconds": time.perf_counter() - started_at,
    }


GEN_LABEL = re.compile(r"gen(\d+)")


def played_by(path: Path, k: int) -> set[int | None]:
    """The generations whose models played a file of folder k: its manifest's `genN` labels (a label
    naming no generation: None), else generation k - 1's (a local loop's folder holds only those)."""
    if not manifest_path(path).is_file():
        return {k - 1}
    labels = {str(row.get("model")) for row in read_manifest(manifest_path(path))}
    return {int(m[1]) if (m := GEN_LABEL.fullmatch(label)) else None for label in labels}


def window_files(paths: RunPaths, g: int, window: int, max_age: int = 0) -> list[Path]:
    """The newest `window` self-play files of generations 1..g (generation order, then file name); with
    `max_age`, only files whose every game was played by a model of generations g - max_age .. g - 1."""
    files = [
        (k, f)
        for k in range(1, g + 1)
        for f in sorted(paths.selfplay(k).glob("*.hcpe3"))
        if f.stat().st_size > 0
    ]
    if max_age:
        young: set[int | None] = set(range(g - max_age, g))
        files = [(k, f) for k, f in files if played_by(f, k) <= young]
    return [f for _, f in files][-window:]


def step_train(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    from train.trainer.config import TrainConfig

    s = cfg.schedules()
    out = paths.train(g)
    resume = (out / "checkpoint.pt").is_file()
    age = cfg.max_model_age
    if cfg.window_positions:
        files = newest_by_positions(window_files(paths, g, 1 << 30, age), cfg.window_positions)
    else:
        files = window_files(paths, g, at_generation(s["window"], g), age)
    if not files:
        raise UserError(f"{paths.selfplay(g)}: no self-play records to train on")
    selfplay_positions = sum(count_targets(f) for f in files)
    extra = anchor_files(cfg, g, selfplay_positions)
    log(
        f"gen {g}: training on {len(files)} file(s)"
        + (f" of the models of gen {max(g - age, 0)}..{g - 1}" if age else "")
        + (f" + {len(extra)} extra" if extra else "")
        + f" from gen {best_before(cfg, paths, g)}'s weights"
        + (" (resuming)" if resume else "")
    )
    train_config = TrainConfig(
        data=[str(f) for f in [*files, *extra]],
        val_lambda=cfg.val_lambda,
        hcpe3_average=cfg.hcpe3_average,
        mirror=cfg.mirror,
        ema=cfg.ema,
        out=str(out),
        init=str(paths.checkpoint(best_before(cfg, paths, g))),
        resume=resume,
        epochs=at_generation(s["epochs"], g),
        batch_size=at_generation(s["batch_size"], g),
        lr=at_generation(s["lr"], g),
        optimizer=cfg.optimizer,
        seed=cfg.seed + g,
        device=cfg.device,
        workers=cfg.workers,
        log_interval=10,
        progress=cfg.progress,
    )
    if cfg.train_processes > 1:
        from train.trainer.launch import train_processes

        summary = train_processes(train_config, cfg.train_processes)
    else:
        from train.trainer.run import train

        summary = train(train_config)
    if not summary.get("finished"):
        raise Interrupted(f"gen {g}: training stopped ({summary.get('stopped_by')}); checkpoint kept")
    keep = ("steps", "positions", "processes", "seconds", "policy_loss", "value_loss", "loss")
    return {
        **{k: summary[k] for k in keep if k in summary},
        "files": [f.name for f in files],
        "selfplay_positions": selfplay_positions,
        "extra": [f.name for f in extra],
    }


def tensorrt_available() -> bool:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


def export_model(checkpoint: Path, onnx: Path, trt_batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    from export.onnx_export import export_onnx

    started_at = time.perf_counter()
    report = export_onnx(checkpoint, onnx)
    if not report.ok:
        raise UserError(f"{onnx}: export failed its check against PyTorch: {report}")
    record: dict[str, Any] = {"onnx": onnx.name, "policy_max_abs": report.policy_max_abs}
    if tensorrt_available():
        from engine.backends.trt_build import build_cached_engine

        record["engine"] = str(build_cached_engine(onnx, onnx.parent, max_batch=trt_batch))
        log(f"TensorRT engine {record['engine']}")
    record["seconds"] = time.perf_counter() - started_at
    return record


def step_export(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"gen {g}: exporting {paths.onnx(g)}")
    return export_model(paths.checkpoint(g), paths.onnx(g), max(cfg.eval_batch, 1), log)


def model_engine(cfg: LoopConfig, model: Path, name: str) -> EngineSpec:
    """The USI engine playing `model` with a fixed node budget (set per move by the match)."""
    options = {
        "DNN_Model": str(model),
        "Backend": cfg.backend,
        "DNN_Batch_Size": str(cfg.eval_batch),
        "Search_Mode": "puct",
        "USI_Ponder": "false",
    }
    return EngineSpec(str(USI_ENGINE), options, name)


def opponents(cfg: LoopConfig, paths: RunPaths, g: int) -> dict[str, EngineSpec]:
    """Previous generation (with --gate: the best so far), the random-init generation 0 and the --anchor
    generation (each the same match as 'prev' when it is the previous one), --eval-engine, the greedy
    player."""
    best = best_before(cfg, paths, g)
    out = {"prev": model_engine(cfg, play_model(paths, best), f"gen{best}")}
    if best > 0:
        out["gen0"] = model_engine(cfg, play_model(paths, 0), "gen0")
    if 0 < cfg.anchor < g and cfg.anchor != best:
        out["anchor"] = model_engine(cfg, play_model(paths, cfg.anchor), f"gen{cfg.anchor}")
    if cfg.init:
        out["random"] = model_engine(cfg, paths.random_onnx, "random-init")
    if cfg.eval_engine:
        out[ENGINE] = EngineSpec(cfg.eval_engine, cfg.eval_engine_options())
    if cfg.greedy:
        out["greedy"] = EngineSpec(str(GREEDY_ENGINE), {"Seed": str(cfg.seed + g)}, "greedy")
    return out


@dataclass(frozen=True)
class EvalMatch:
    """One evaluation match: the generation's engine against an opponent, each with its own `go` limit,
    from the openings, one CSA file per game into the folder."""

    me: EngineSpec
    other: EngineSpec
    limits: tuple[GoLimit, GoLimit]
    openings: Sequence[Opening]
    csa_dir: Path


MatchPlayer = Callable[[EvalMatch], MatchResult]
"""Plays a match's `eval_games` games: here (`local_matches`) or as Ray tasks on a cluster
(`train.loop.cluster_eval`)."""


def eval_limits(cfg: LoopConfig, opponent: str) -> tuple[GoLimit, GoLimit]:
    """The evaluated generation's playouts and the opponent's: the same for a model, --eval-engine's own
    limit for it (an external engine has no playouts)."""
    ours = GoLimit(nodes=cfg.eval_nodes)
    if opponent == ENGINE:
        return ours, GoLimit(nodes=cfg.eval_engine_nodes or None, byoyomi=cfg.eval_engine_byoyomi or None)
    return ours, ours


def limit_text(limit: GoLimit) -> str:
    """`nodes 30000, byoyomi 100` for a log line."""
    return ", ".join(f"{k} {v}" for k, v in limit.settings().items())


@contextmanager
def local_matches(cfg: LoopConfig) -> Iterator[MatchPlayer]:
    """Matches played here one after another, the evaluated engine started once for all of them."""
    with ExitStack() as stack:
        running: dict[str, UsiProcess] = {}

        def play(match: EvalMatch) -> MatchResult:
            label = match.me.label
            if label not in running:
                (running[label],) = stack.enter_context(started([match.me], cfg.eval_timeout))
            with started([match.other], cfg.eval_timeout) as (engine,):
                return play_match(
                    [running[label], engine],
                    cfg.eval_games,
                    match.limits,
                    max_moves=cfg.eval_max_moves,
                    openings=match.openings,
                    csa_dir=match.csa_dir,
                    progress=cfg.progress,
                )

        yield play


def step_eval(
    cfg: LoopConfig,
    paths: RunPaths,
    g: int,
    state: LoopState,
    log: Callable[[str], None],
    play: MatchPlayer | None = None,
) -> dict[str, Any]:
    """Generation g's matches against `opponents` (played by `play`, here by default) and held-out losses."""
    started_at = time.perf_counter()
    matches: dict[str, Any] = state.gen(g).setdefault("eval_matches", {})
    todo = {k: v for k, v in opponents(cfg, paths, g).items() if k not in matches}
    if todo and cfg.eval_games:
        openings = random_openings((cfg.eval_games + 1) // 2, cfg.eval_random_plies, cfg.seed + g)
        me = model_engine(cfg, play_model(paths, g), f"gen{g}")
        with ExitStack() as stack:
            play = play or stack.enter_context(local_matches(cfg))
            for key, spec in todo.items():
                limits = eval_limits(cfg, key)
                theirs = "" if limits[1] == limits[0] else "; it: " + limit_text(limits[1])
                log(f"gen {g}: {cfg.eval_games} games vs {spec.label} ({cfg.eval_nodes} nodes/move{theirs})")
                match = EvalMatch(me, spec, limits, openings, paths.gen(g) / "eval" / key)
                result = play(match)
                log(f"gen {g}: {result}")
                matches[key] = result.summary()
                state.save()  # a finished match survives an interruption of the next one
    best = best_before(cfg, paths, g)
    if "prev" in matches:  # a reference that is the previous generation: that same match
        if best == 0:
            matches["gen0"] = matches["prev"]
        if cfg.anchor and cfg.anchor == best:
            matches["anchor"] = matches["prev"]
    record: dict[str, Any] = {"matches": matches}
    if cfg.gate and "prev" in matches:
        record["accepted"] = matches["prev"]["score"] >= cfg.gate
        record["best"] = g if record["accepted"] else best
        verdict = "accepted" if record["accepted"] else "rejected"
        log(f"gen {g}: {verdict} against gen {best} (gate {cfg.gate})")
    if cfg.test:
        from train.trainer.evaluation import evaluate_checkpoint

        tests = [str(p) for p in cfg.test_paths()]
        held_out = evaluate_checkpoint(paths.checkpoint(g), tests, paths.root / "cache", device=cfg.device)
        record["held_out"] = held_out
        log(f"gen {g}: held-out " + ", ".join(f"{k} {v:.4g}" for k, v in record["held_out"].items()))
    return {**record, "seconds": time.perf_counter() - started_at}
