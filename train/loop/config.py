"""A learning loop's settings (LoopConfig and its per-generation schedules), its run folder and the
state.json that records which steps of which generations are done."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.network_config import preset
from engine.errors import UserError
from engine.fileio import atomic_write_text

if TYPE_CHECKING:
    from engine.selfplay.config import SelfPlayConfig

STATE_VERSION = 1


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
    full_fraction: float = 1.0  # playout-cap randomisation: share of moves searched fully (with a target)
    fast_sims: int = 0  # the other moves' fast search (0: sims/8)
    parallel: str = "64"
    selfplay_batch: str = "256"
    selfplay_processes: int = 1  # search processes (bin/selfplay --processes)
    int8: bool = False  # self-play on a CPU runs the network quantized to int8 (bin/selfplay --int8)
    inference_server: str = "auto"  # one network process for all of them: auto (on a GPU), on, off
    devices: str = ""  # several devices of this host, "cuda:0,cuda:1": an inference server each
    ray: str = ""  # a Ray cluster's address (auto or HEAD:6379): self-play on its nodes, never waiting
    max_moves: int = 320
    random_plies: int = 0
    # the self-play targets (bin/selfplay's flags of the same names; docs/selfplay.md)
    c_scale: float = 0.1
    q_transform: str = "minmax"
    policy_target: str = "improved"
    value_target: str = "policy"
    # self-play games against an external USI engine (bootstrapping from it, as dlshogi did from elmo)
    usi_engine: str | None = None  # its command line
    usi_option: str = ""  # "NAME=VALUE,NAME=VALUE"
    usi_byoyomi: int = 0  # its time per move (ms) ...
    usi_nodes: int = 0  # ... or node budget per move; 0 = not given
    usi_fraction: float = 1.0
    usi_engines: int = 1
    # training
    window: str = "8"  # newest self-play files trained on
    max_model_age: int = 0  # generation g trains only on games of models g-A..g-1 (0: any model)
    window_positions: int = 0  # train on the newest self-play files holding this many targets (0: --window)
    extra_data: str = ""  # comma-separated records (files or folders) mixed into training (an anchor)
    extra_share: float = 0.0  # their share of a generation's positions, files taken in turn (0: all, always)
    test: str = ""  # comma-separated held-out records each generation is measured on (e.g. an engine's games)
    # as stage 9 was trained: the stored eval weighs 0.8 (game results alone taught a one-generation
    # fine-tune the wrong value), duplicate positions merged, half the batches mirrored
    val_lambda: float = 0.8  # trainer's mix of the stored eval into the value target
    hcpe3_average: bool = True  # the trainer merges duplicate positions (bin/train --hcpe3-average)
    mirror: float = 0.5  # the trainer's left-right mirror probability
    ema: float = 0.0  # the trainer's EMA decay of the weights (0: off)
    epochs: str = "1"
    batch_size: str = "256"
    lr: str = "0.01"
    optimizer: str = "sgd"
    workers: int = 0
    train_processes: int = 1  # >1: training under torchrun, one DDP process per GPU of this host
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
    eval_engine: str | None = None  # a fixed external USI engine every generation also plays (an Elo anchor)
    eval_engine_option: str = ""  # its options, "NAME=VALUE,NAME=VALUE" (e.g. gpsshogi's LimitDepth=5)
    eval_engine_byoyomi: int = 0  # its time per move (ms) ...
    eval_engine_nodes: int = 0  # ... and/or node budget per move; 0 = not given
    gate: float = 0.0  # accept a generation only at this score against the best so far (0: every one)
    greedy: bool = True
    progress: bool = True

    def schedules(self) -> dict[str, list]:
        ints = ("games", "sims", "parallel", "selfplay_batch", "window", "epochs", "batch_size")
        out = {k: parse_schedule(getattr(self, k), int, k.replace("_", "-")) for k in ints}
        out["lr"] = parse_schedule(self.lr, float, "lr")
        return out

    def usi_options(self) -> dict[str, str]:
        return option_dict(self.usi_option)

    def eval_engine_options(self) -> dict[str, str]:
        return option_dict(self.eval_engine_option)

    def extra_paths(self) -> list[Path]:
        return path_list(self.extra_data)

    def test_paths(self) -> list[Path]:
        return path_list(self.test)

    def validate(self) -> None:
        self.schedules()
        self.eval_engine_options()
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
            (
                self.eval_engine_byoyomi >= 0 and self.eval_engine_nodes >= 0,
                "--eval-engine-* limits must be >= 0",
            ),
            (
                not self.eval_engine or bool(self.eval_engine_byoyomi or self.eval_engine_nodes),
                "--eval-engine needs its search limit: --eval-engine-byoyomi MS and/or --eval-engine-nodes N",
            ),
            (self.window_positions >= 0, "--window-positions must be >= 0"),
            (0 <= self.gate < 1, "--gate must be a score in [0, 1)"),
            (not self.gate or self.eval_games > 0, "--gate needs evaluation games (--eval-games > 0)"),
            (0 <= self.extra_share < 1, "--extra-share must be in [0, 1)"),
            (not self.extra_share or bool(self.extra_data), "--extra-share needs --extra-data"),
            (self.max_model_age >= 0, "--max-model-age must be >= 0"),
            (self.workers >= 0, "--workers must be >= 0"),
            (self.train_processes >= 1, "--train-processes must be >= 1"),
            (
                self.train_processes == 1 or not (self.device or "").startswith("cuda:"),
                f"--train-processes {self.train_processes} puts process i on cuda:i: give --device cuda, "
                f"not {self.device}",
            ),
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


def option_dict(text: str) -> dict[str, str]:
    """`NAME=VALUE,NAME=VALUE` (a comma-separated option) -> {name: value}; UserError if malformed."""
    from engine.usi_client import parse_usi_options

    return parse_usi_options(item for item in text.split(",") if item.strip())


def path_list(text: str) -> list[Path]:
    """`a.hcpe,b/` -> paths (a comma-separated option)."""
    return [Path(p.strip()) for p in text.split(",") if p.strip()]


def selfplay_config(cfg: LoopConfig, g: int, folder: Path, model: Path, before: int = 0) -> SelfPlayConfig:
    """Generation g's self-play settings; `before` games are already in the folder."""
    from engine.selfplay.config import SelfPlayConfig, parse_devices

    s = cfg.schedules()
    games = max(at_generation(s["games"], g) - before, 1)
    config = SelfPlayConfig(
        out_dir=folder,
        games=games,
        parallel=min(at_generation(s["parallel"], g), games),
        sims=at_generation(s["sims"], g),
        full_fraction=cfg.full_fraction,
        fast_sims=cfg.fast_sims,
        max_moves=cfg.max_moves,
        random_plies=cfg.random_plies,
        c_scale=cfg.c_scale,
        q_transform=cfg.q_transform,
        policy_target=cfg.policy_target,
        value_target=cfg.value_target,
        seed=cfg.seed * 1_000_003 + g * 10_007 + before,  # resumed games differ from the first ones
        model=str(model),
        backend=cfg.backend,
        device=cfg.device,
        int8=cfg.int8,
        batch=at_generation(s["selfplay_batch"], g),
        processes=cfg.selfplay_processes,
        inference_server=cfg.inference_server,
        devices=parse_devices(cfg.devices),
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
