"""The learning loop: self-play -> train on the newest window -> export -> evaluate, generation after
generation, resumable at every step.

Layout of a run folder:
    state.json                  finished steps per generation (atomic), the source of truth for resuming
    generations.jsonl           one line per evaluated generation (games, losses, Elo vs each opponent)
    strength.png                Elo over generations
    gen0000/model.pt, .onnx     the random-init network (a fixed reference opponent)
    genNNNN/selfplay/*.hcpe3    games played by generation N-1's model
    genNNNN/train/              the trainer's run (model.pt, checkpoint.pt, metrics.jsonl)
    genNNNN/model.onnx          the exported model (plus a TensorRT engine where TensorRT imports)
    genNNNN/eval/<opponent>/    one CSA file per evaluation game

An interrupted step resumes from what it left: self-play counts the whole games already in its folder
and plays only the rest; training continues its checkpoint; evaluation keeps finished matches.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.network import build, load_model, preset, save_checkpoint
from engine.errors import UserError
from engine.fileio import atomic_write_text
from engine.match.arbiter import EngineSpec, play_match, random_openings, started
from engine.records.formats import iter_hcpe3_games

if TYPE_CHECKING:
    from engine.selfplay.runner import SelfPlayConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
USI_ENGINE = REPO_ROOT / "bin" / "usi_engine"
GREEDY_ENGINE = REPO_ROOT / "bin" / "greedy_usi"
STEPS = ("selfplay", "train", "export", "eval")
STATE_VERSION = 1


class Interrupted(KeyboardInterrupt):
    """A step stopped on SIGINT/SIGTERM after saving what it had; rerun the loop to continue."""


# ----- schedules -----


def parse_schedule(text: str | int | float, kind: type = int, name: str = "value") -> list:
    """`100` or `100:200:400` -> per-generation values (the last one repeats)."""
    parts = str(text).split(":")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise UserError(f"--{name}: expected {kind.__name__} values separated by ':', got {text!r}") from None
    if any(v <= 0 for v in values):
        raise UserError(f"--{name}: values must be positive, got {text!r}")
    return values


def at_generation(schedule: Sequence, generation: int) -> Any:
    return schedule[min(generation, len(schedule)) - 1]


# ----- configuration -----


@dataclass
class LoopConfig:
    dir: str = "run"
    generations: int = 10
    network: str = "small"
    init: str | None = None  # start from this checkpoint (gen 0) instead of a random-init network
    activation: str | None = None  # relu|swish of a dlshogi --init checkpoint that does not say
    seed: int = 0
    # self-play (schedules: "a:b:c" = per-generation values, the last repeated)
    games: str = "200"
    sims: str = "32"
    parallel: str = "64"
    selfplay_batch: str = "256"
    selfplay_processes: int = 1  # search processes (bin/selfplay --processes)
    inference_server: str = "auto"  # one network process for all of them: auto (on a GPU), on, off
    max_moves: int = 320
    random_plies: int = 0
    # self-play games against an external USI engine (bootstrapping from it, as dlshogi did from elmo)
    usi_engine: str | None = None  # its command line
    usi_option: str = ""  # "NAME=VALUE,NAME=VALUE"
    usi_byoyomi: int = 0  # its time per move (ms) ...
    usi_nodes: int = 0  # ... or node budget per move; 0 = not given
    usi_fraction: float = 1.0
    usi_engines: int = 1
    # training
    window: str = "8"  # newest self-play files trained on
    extra_data: str = ""  # comma-separated records mixed into every generation's training (an anchor)
    test: str = ""  # comma-separated held-out records each generation is measured on (e.g. an engine's games)
    val_lambda: float = 0.0  # trainer's mix of the stored eval into the value target
    epochs: str = "1"
    batch_size: str = "256"
    lr: str = "0.01"
    optimizer: str = "sgd"
    workers: int = 0
    # serving and evaluation
    backend: str = "auto"
    device: str | None = None
    eval_games: int = 20
    eval_nodes: int = 64
    eval_max_moves: int = 256
    eval_random_plies: int = 4
    eval_batch: int = 16
    eval_timeout: float = 120.0
    anchor: int = 0  # a fixed reference generation every later one also plays (0: none besides gen 0)
    greedy: bool = True
    progress: bool = True

    def schedules(self) -> dict[str, list]:
        ints = ("games", "sims", "parallel", "selfplay_batch", "window", "epochs", "batch_size")
        out = {k: parse_schedule(getattr(self, k), int, k.replace("_", "-")) for k in ints}
        out["lr"] = parse_schedule(self.lr, float, "lr")
        return out

    def usi_options(self) -> dict[str, str]:
        from engine.selfplay.runner import parse_usi_options

        return parse_usi_options(item for item in self.usi_option.split(",") if item.strip())

    def extra_paths(self) -> list[Path]:
        return path_list(self.extra_data)

    def test_paths(self) -> list[Path]:
        return path_list(self.test)

    def validate(self) -> None:
        self.schedules()
        selfplay_config(self, 1, RunPaths(Path(self.dir)).selfplay(1), Path("model.onnx"))  # --usi-*
        checks = [
            (self.generations >= 1, "--generations must be >= 1"),
            (self.max_moves >= 1 and self.eval_max_moves >= 1, "--max-moves must be >= 1"),
            (self.random_plies >= 0 and self.eval_random_plies >= 0, "--random-plies must be >= 0"),
            (self.eval_games >= 0, "--eval-games must be >= 0"),
            (self.eval_nodes >= 1, "--eval-nodes must be >= 1"),
            (self.eval_batch >= 1, "--eval-batch must be >= 1"),
            (self.eval_timeout > 0, "--eval-timeout must be > 0"),
            (self.anchor >= 0, "--anchor must be >= 0"),
            (self.workers >= 0, "--workers must be >= 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(msg)
        for flag, given in (("--extra-data", self.extra_paths()), ("--test", self.test_paths())):
            for p in given:
                if not p.exists():
                    raise UserError(f"{flag} {p}: no such file or folder")
        preset(self.network)
        run = Path(self.dir)
        if run.exists() and not run.is_dir():
            raise UserError(f"--dir {run}: not a directory")


def path_list(text: str) -> list[Path]:
    """`a.hcpe,b/` -> paths (a comma-separated option)."""
    return [Path(p.strip()) for p in text.split(",") if p.strip()]


# ----- run folder and state -----


@dataclass
class RunPaths:
    root: Path

    def gen(self, g: int) -> Path:
        return self.root / f"gen{g:04d}"

    def selfplay(self, g: int) -> Path:
        return self.gen(g) / "selfplay"

    def train(self, g: int) -> Path:
        return self.gen(g) / "train"

    def checkpoint(self, g: int) -> Path:
        return self.gen(0) / "model.pt" if g == 0 else self.train(g) / "model.pt"

    def onnx(self, g: int) -> Path:
        return self.gen(g) / "model.onnx"

    @property
    def random_checkpoint(self) -> Path:
        """The random-init reference opponent of a run started from --init (else gen 0 is it)."""
        return self.gen(0) / "random.pt"

    @property
    def random_onnx(self) -> Path:
        return self.gen(0) / "random.onnx"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def jsonl(self) -> Path:
        return self.root / "generations.jsonl"

    @property
    def plot(self) -> Path:
        return self.root / "strength.png"


@dataclass
class LoopState:
    path: Path
    network: str
    generations: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, network: str) -> LoopState:
        if not path.exists():
            return cls(path, network)
        try:
            data = json.loads(path.read_text())
            return cls(path, data["network"], data["generations"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not a loop state file ({e})") from None

    def save(self) -> None:
        data = {"version": STATE_VERSION, "network": self.network, "generations": self.generations}
        atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")

    def gen(self, g: int) -> dict[str, Any]:
        return self.generations.setdefault(str(g), {})

    def done(self, g: int, step: str) -> bool:
        return step in self.generations.get(str(g), {})

    def finish(self, g: int, step: str, record: dict[str, Any]) -> None:
        self.gen(g)[step] = {**record, "finished_at": time.time()}
        self.save()


# ----- self-play -----


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


def play_model(paths: RunPaths, g: int) -> Path:
    """The file generation g's model is served from (ONNX; the runtime picks TensorRT where it can)."""
    return paths.onnx(g)


def selfplay_config(cfg: LoopConfig, g: int, folder: Path, model: Path, before: int = 0) -> SelfPlayConfig:
    """Generation g's self-play settings; `before` games are already in the folder."""
    from engine.selfplay.runner import SelfPlayConfig

    s = cfg.schedules()
    games = max(at_generation(s["games"], g) - before, 1)
    config = SelfPlayConfig(
        out_dir=folder,
        games=games,
        parallel=min(at_generation(s["parallel"], g), games),
        sims=at_generation(s["sims"], g),
        max_moves=cfg.max_moves,
        random_plies=cfg.random_plies,
        seed=cfg.seed * 1_000_003 + g * 10_007 + before,  # resumed games differ from the first ones
        model=str(model),
        backend=cfg.backend,
        device=cfg.device,
        batch=at_generation(s["selfplay_batch"], g),
        processes=cfg.selfplay_processes,
        inference_server=cfg.inference_server,
        progress=cfg.progress,
        usi_engine=cfg.usi_engine or None,
        usi_options=cfg.usi_options(),
        usi_byoyomi=cfg.usi_byoyomi or None,
        usi_nodes=cfg.usi_nodes or None,
        usi_fraction=cfg.usi_fraction,
        usi_engines=cfg.usi_engines,
    )
    config.validate()
    return config


def step_selfplay(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    from engine.selfplay.runner import run_selfplay

    target = at_generation(cfg.schedules()["games"], g)
    folder = paths.selfplay(g)
    folder.mkdir(parents=True, exist_ok=True)
    before, _ = count_games(folder)
    started_at = time.perf_counter()
    if before < target:
        log(f"gen {g}: self-play {target - before} games ({before} already played) with gen {g - 1}'s model")
        stats = run_selfplay(selfplay_config(cfg, g, folder, play_model(paths, g - 1), before))
        if stats.interrupted:
            raise Interrupted(f"gen {g}: self-play interrupted; {stats.games} more games kept")
    games, positions = count_games(folder)
    return {
        "games": games,
        "positions": positions,
        "games_this_session": games - before,
        "seconds": time.perf_counter() - started_at,
    }


# ----- training -----


def window_files(paths: RunPaths, g: int, window: int) -> list[Path]:
    """The newest `window` self-play files of generations 1..g (generation order, then file name)."""
    files = [
        f for k in range(1, g + 1) for f in sorted(paths.selfplay(k).glob("*.hcpe3")) if f.stat().st_size > 0
    ]
    return files[-window:]


def step_train(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    from train.trainer import TrainConfig, train

    s = cfg.schedules()
    out = paths.train(g)
    resume = (out / "checkpoint.pt").is_file()
    files = window_files(paths, g, at_generation(s["window"], g))
    if not files:
        raise UserError(f"{paths.selfplay(g)}: no self-play records to train on")
    extra = cfg.extra_paths()
    log(
        f"gen {g}: training on {len(files)} file(s)"
        + (f" + {len(extra)} extra" if extra else "")
        + f" from gen {g - 1}'s weights"
        + (" (resuming)" if resume else "")
    )
    summary = train(
        TrainConfig(
            data=[str(f) for f in [*files, *extra]],
            val_lambda=cfg.val_lambda,
            out=str(out),
            init=str(paths.checkpoint(g - 1)),
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
    )
    if not summary.get("finished"):
        raise Interrupted(f"gen {g}: training stopped ({summary.get('stopped_by')}); checkpoint kept")
    keep = ("steps", "positions", "seconds", "policy_loss", "value_loss", "loss")
    return {**{k: summary[k] for k in keep if k in summary}, "files": [f.name for f in files]}


# ----- export -----


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
        from export.build_engine import build_engine

        record["engine"] = str(build_engine(onnx, onnx.parent, max_batch=trt_batch))
        log(f"TensorRT engine {record['engine']}")
    record["seconds"] = time.perf_counter() - started_at
    return record


def step_export(cfg: LoopConfig, paths: RunPaths, g: int, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"gen {g}: exporting {paths.onnx(g)}")
    return export_model(paths.checkpoint(g), paths.onnx(g), max(cfg.eval_batch, 1), log)


# ----- evaluation -----


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
    """Previous generation, the random-init generation 0 and the --anchor generation (each the same match
    as 'prev' when it is the previous one), the greedy player."""
    out = {"prev": model_engine(cfg, play_model(paths, g - 1), f"gen{g - 1}")}
    if g > 1:
        out["gen0"] = model_engine(cfg, play_model(paths, 0), "gen0")
    if 0 < cfg.anchor < g - 1:
        out["anchor"] = model_engine(cfg, play_model(paths, cfg.anchor), f"gen{cfg.anchor}")
    if cfg.init:
        out["random"] = model_engine(cfg, paths.random_onnx, "random-init")
    if cfg.greedy:
        out["greedy"] = EngineSpec(str(GREEDY_ENGINE), {"Seed": str(cfg.seed + g)}, "greedy")
    return out


def step_eval(
    cfg: LoopConfig, paths: RunPaths, g: int, state: LoopState, log: Callable[[str], None]
) -> dict[str, Any]:
    started_at = time.perf_counter()
    matches: dict[str, Any] = state.gen(g).setdefault("eval_matches", {})
    todo = {k: v for k, v in opponents(cfg, paths, g).items() if k not in matches}
    if todo and cfg.eval_games:
        openings = random_openings((cfg.eval_games + 1) // 2, cfg.eval_random_plies, cfg.seed + g)
        with started([model_engine(cfg, play_model(paths, g), f"gen{g}")], cfg.eval_timeout) as (me,):
            for key, spec in todo.items():
                log(f"gen {g}: {cfg.eval_games} games vs {spec.label} ({cfg.eval_nodes} nodes/move)")
                with started([spec], cfg.eval_timeout) as (other,):
                    result = play_match(
                        [me, other],
                        cfg.eval_games,
                        nodes=cfg.eval_nodes,
                        max_moves=cfg.eval_max_moves,
                        openings=openings,
                        csa_dir=paths.gen(g) / "eval" / key,
                        progress=cfg.progress,
                    )
                log(f"gen {g}: {result}")
                matches[key] = result.summary()
                state.save()  # a finished match survives an interruption of the next one
    if "prev" in matches:  # a reference that is the previous generation: that same match
        if g == 1:
            matches["gen0"] = matches["prev"]
        if cfg.anchor and cfg.anchor == g - 1:
            matches["anchor"] = matches["prev"]
    record: dict[str, Any] = {"matches": matches}
    if cfg.test:
        from train.trainer import evaluate_checkpoint

        tests = [str(p) for p in cfg.test_paths()]
        held_out = evaluate_checkpoint(paths.checkpoint(g), tests, paths.root / "cache", device=cfg.device)
        record["held_out"] = held_out
        log(f"gen {g}: held-out " + ", ".join(f"{k} {v:.4g}" for k, v in record["held_out"].items()))
    return {**record, "seconds": time.perf_counter() - started_at}


# ----- records of the run -----


def generation_row(state: LoopState, g: int) -> dict[str, Any]:
    """The generations.jsonl line of generation g (needs its eval step finished)."""
    gen = state.generations[str(g)]
    prev_ladder = 0.0 if g == 1 else state.generations[str(g - 1)].get("ladder_elo")
    matches = gen["eval"]["matches"]
    row: dict[str, Any] = {
        "generation": g,
        "games": gen["selfplay"]["games"],
        "positions": gen["selfplay"]["positions"],
        "policy_loss": gen["train"].get("policy_loss"),
        "value_loss": gen["train"].get("value_loss"),
        "train_steps": gen["train"].get("steps"),
    }
    for key, m in matches.items():
        row[f"vs_{key}"] = {
            k: m[k] for k in ("wins", "losses", "draws", "score", "elo", "elo_error95", "los")
        }
    if "held_out" in gen["eval"]:
        row["held_out"] = gen["eval"]["held_out"]
    prev = matches.get("prev")
    row["ladder_elo"] = prev_ladder + prev["elo"] if prev and prev_ladder is not None else None
    errs = [
        state.generations[str(k)]["eval"]["matches"].get("prev", {}).get("elo_error95")
        for k in range(1, g + 1)
    ]
    row["ladder_error95"] = math.sqrt(sum(e * e for e in errs)) if all(e is not None for e in errs) else None
    row["seconds"] = {s: gen[s].get("seconds") for s in STEPS}
    return row


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one whole line, unless this generation's line is already there (a rerun after a crash)."""
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("generation") == row["generation"]:
                    return
            except ValueError:
                continue
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def plot_strength(rows: list[dict[str, Any]], png: Path) -> None:
    """Elo (with 95% bars) over generations: the chained ladder, vs gen 0, vs the greedy player."""
    from train.plot import plt, save_figure

    fig, (ax, ax_loss) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    gens = [r["generation"] for r in rows]
    series = [("ladder_elo", "ladder_error95", "ladder (chained vs previous)")]
    series += [(f"vs_{k}", None, f"vs {k}") for k in ("gen0", "anchor", "random", "greedy")]
    for key, err_key, label in series:
        pts = []
        for r in rows:
            v = r.get(key)
            if isinstance(v, dict):
                pts.append((r["generation"], v["elo"], v["elo_error95"]))
            elif v is not None:
                pts.append((r["generation"], v, r.get(err_key) or 0.0))
        if pts:
            x, y, e = zip(*pts, strict=True)
            ax.errorbar(x, y, yerr=[min(v, 2000.0) for v in e], marker="o", capsize=3, label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("Elo")
    if ax.get_legend_handles_labels()[0]:  # a run without evaluation games has no strength to show
        ax.legend(loc="best")
    ax.grid(alpha=0.3)
    for key in ("policy_loss", "value_loss"):
        pts = [(g, r[key]) for g, r in zip(gens, rows, strict=True) if r.get(key) is not None]
        if pts:
            ax_loss.plot(*zip(*pts, strict=True), marker="o", label=key.replace("_", " "))
    ax_loss.set_ylabel("train loss")
    ax_loss.set_xlabel("generation")
    if ax_loss.get_legend_handles_labels()[0]:
        ax_loss.legend(loc="upper left")
    held = [(r["generation"], r["held_out"]) for r in rows if r.get("held_out")]
    if held:  # accuracy on --test records, on its own axis
        ax_acc = ax_loss.twinx()
        for key, style in (("test_policy_acc", "s--"), ("test_value_acc", "^--")):
            ax_acc.plot([g for g, _ in held], [h[key] for _, h in held], style, label=f"held-out {key[5:]}")
        ax_acc.set_ylabel("held-out accuracy")
        ax_acc.legend(loc="upper right")
    ax_loss.grid(alpha=0.3)
    save_figure(fig, png)


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a torn last line
    return sorted(rows, key=lambda r: r["generation"])


# ----- the loop -----


def init_generation0(cfg: LoopConfig, paths: RunPaths, state: LoopState, log: Callable[[str], None]) -> None:
    """Generation 0: a random-init network, or the --init checkpoint plus a random-init reference of its
    architecture (so 'vs random' is measured either way)."""
    if state.done(0, "export"):
        return
    ckpt = paths.checkpoint(0)
    if cfg.init:
        net = load_model(cfg.init, cfg.activation)
        if not ckpt.exists():
            save_checkpoint(ckpt, net, generation=0, source=str(cfg.init))
            log(f"gen 0: {cfg.init} ({net.config.blocks}x{net.config.channels}) -> {ckpt}")
        if not paths.random_checkpoint.exists():
            save_checkpoint(paths.random_checkpoint, build(net.config, seed=cfg.seed), generation=0)
        export_model(paths.random_checkpoint, paths.random_onnx, cfg.eval_batch, log)
    elif not ckpt.exists():
        save_checkpoint(ckpt, build(preset(cfg.network), seed=cfg.seed), generation=0)
        log(f"gen 0: random-init '{cfg.network}' network (seed {cfg.seed}) -> {ckpt}")
    state.finish(0, "export", export_model(ckpt, paths.onnx(0), cfg.eval_batch, log))


def run_loop(
    cfg: LoopConfig,
    log: Callable[[str], None] | None = None,
    on_step: Callable[[int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run (or continue) generations 1..cfg.generations; returns all generations.jsonl rows.
    `on_step(g, step)` is called after each finished step (progress reporting; tests interrupt here)."""
    cfg.validate()
    log = log or (lambda msg: print(msg, flush=True))
    paths = RunPaths(Path(cfg.dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    state = LoopState.load(paths.state, cfg.network)
    if state.network != cfg.network:
        log(f"note: {paths.root} was started with network '{state.network}'; --network {cfg.network} ignored")
        cfg = dataclasses.replace(cfg, network=state.network)
    if not state.generations:
        state.save()
    init_generation0(cfg, paths, state, log)
    for g in range(1, cfg.generations + 1):
        for step in STEPS:
            if state.done(g, step):
                continue
            if step == "selfplay":
                record = step_selfplay(cfg, paths, g, log)
            elif step == "train":
                record = step_train(cfg, paths, g, log)
            elif step == "export":
                record = step_export(cfg, paths, g, log)
            else:
                record = step_eval(cfg, paths, g, state, log)
            state.finish(g, step, record)
            if on_step is not None:
                on_step(g, step)
        if not state.gen(g).get("recorded"):
            row = generation_row(state, g)
            append_row(paths.jsonl, row)
            plot_strength(read_rows(paths.jsonl), paths.plot)
            state.gen(g).update(ladder_elo=row["ladder_elo"], recorded=True)
            state.save()
            log(
                f"gen {g}: "
                + ", ".join(f"{k} {v['elo']:+.0f}" for k, v in row.items() if k.startswith("vs_"))
            )
    return read_rows(paths.jsonl)
