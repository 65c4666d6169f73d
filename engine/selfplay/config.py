"""Self-play settings: what to play, how to search and where to write, checked before any work."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import UserError
from engine.fileio import check_output_dir
from engine.search.gumbel import POLICY_TARGETS, Q_TRANSFORMS, VALUE_TARGETS
from engine.usi_spec import DEFAULT_MOVE_TIMEOUT, EngineSpec

if TYPE_CHECKING:  # numpy, cshogi and numba: not for bin/selfplay's flags
    from engine.backends.evaluator import Evaluator
    from engine.search.gumbel_search import GumbelParams

FORMATS = ("hcpe3", "data")

USI_COLOURS = ("black", "white", "alternate")

INFERENCE_SERVER = ("auto", "on", "off")


@dataclass
class SelfPlayConfig:
    out_dir: str | Path = "selfplay"
    games: int = 64
    parallel: int = 64
    processes: int = 1
    groups: int = 2
    sims: int = 32
    # playout-cap randomisation: a full search of `sims` on a `full_fraction` of the moves, the only ones
    # written with a policy target; a fast search of `fast_sims` on the others (their moves are recorded
    # without one, hcpe3 candidateNum 0, so training skips them). 1.0: every search full.
    full_fraction: float = 1.0
    fast_sims: int = 0  # 0: sims // 8 (at least 2)
    considered: int = 16
    c_visit: float = 50.0
    # the targets (docs/selfplay.md#targets): mctx's c_scale 0.1 and the improved policy's expected Q, as
    # bench/targets.py measured them (c_scale 1 gave near one-hot targets, the root mean a biased value)
    c_scale: float = 0.1
    q_transform: str = "minmax"  # sigma's input: Q min-max rescaled (mctx) or "absolute" (as it is)
    policy_target: str = "improved"  # the improved policy, or "visits" (the root's visit counts)
    value_target: str = "policy"  # eval written: "policy" (sum pi' q), "mean" (root mean), "chosen" (its Q)
    max_moves: int = 320
    leaf_mate_plies: int = 1  # mate probe at each new leaf (engine.search.mate.leaf_mate_value)
    random_plies: int = 0
    temperature: float = 1.0
    resign_threshold: float = 0.0  # resign when the root value drops below this; 0 never resigns
    resign_playout_fraction: float = 0.1
    seed: int = 0
    format: str = "hcpe3"
    cache_size: int = 300_000
    model: str | None = None
    activation: str | None = None  # relu|swish of a dlshogi checkpoint/npz that does not say
    backend: str = "auto"
    device: str | None = None
    devices: list[str] = field(default_factory=list)  # one inference server per device (--devices)
    batch: int = 256  # the evaluator's max batch; bigger leaf batches are split
    threads: int | None = None  # torch CPU threads per process (default: cores / processes)
    int8: bool = False  # onnxruntime on a CPU: the network quantized to int8 (as the engine's CPU_Int8)
    inference_server: str = "auto"  # one evaluator process for all workers: on, off, auto (with a GPU)
    progress: bool = True
    # games against an external USI engine
    usi_engine: str | None = None  # command line (shell words)
    usi_options: dict[str, str] = field(default_factory=dict)  # setoption name -> value
    usi_byoyomi: int | None = None  # its time per move in ms ...
    usi_nodes: int | None = None  # ... or its node budget per move
    usi_fraction: float = 1.0  # of the games (when an engine is given)
    usi_colour: str = "alternate"  # the colour the engine plays: black, white or alternate
    usi_engines: int = 1  # engine processes per self-play process (each answers one move at a time)
    usi_timeout: float = DEFAULT_MOVE_TIMEOUT  # seconds (on top of the byoyomi) before a game is dropped

    def validate(self) -> None:
        from engine.search.mate import MAX_LEAF_PLIES

        checks = [
            (self.games >= 1, "--games must be >= 1"),
            (self.parallel >= 1, "--parallel must be >= 1"),
            (self.processes >= 1, "--processes must be >= 1"),
            (1 <= self.groups <= 8, "--groups must be 1..8"),
            (self.sims >= 1, "--sims must be >= 1"),
            (0 < self.full_fraction <= 1, "--full-fraction must be in (0, 1]"),
            (0 <= self.fast_sims <= self.sims, "--fast-sims must be 0..--sims"),
            (self.considered >= 1, "--considered must be >= 1"),
            (self.c_visit >= 0 and self.c_scale >= 0, "--c-visit and --c-scale must be >= 0"),
            (self.q_transform in Q_TRANSFORMS, f"--q-transform must be one of {', '.join(Q_TRANSFORMS)}"),
            (
                self.policy_target in POLICY_TARGETS,
                f"--policy-target must be one of {', '.join(POLICY_TARGETS)}",
            ),
            (self.value_target in VALUE_TARGETS, f"--value-target must be one of {', '.join(VALUE_TARGETS)}"),
            (self.max_moves >= 1, "--max-moves must be >= 1"),
            (0 <= self.leaf_mate_plies <= MAX_LEAF_PLIES, f"--leaf-mate must be 0..{MAX_LEAF_PLIES}"),
            (self.random_plies >= 0, "--random-plies must be >= 0"),
            (self.temperature > 0, "--temperature must be > 0"),
            (0 <= self.resign_threshold < 1, "--resign-threshold must be in [0, 1)"),
            (0 <= self.resign_playout_fraction <= 1, "--resign-playout-fraction must be in [0, 1]"),
            (self.format in FORMATS, f"--format must be one of {', '.join(FORMATS)}"),
            (self.batch >= 1, "--batch must be >= 1"),
            (self.cache_size >= 0, "--cache must be >= 0"),
            (
                self.inference_server in INFERENCE_SERVER,
                f"--inference-server must be one of {', '.join(INFERENCE_SERVER)}",
            ),
            *self._usi_checks(),
            *self._device_checks(),
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(msg)
        if self.usi_engine is not None:
            EngineSpec(self.usi_engine).argv  # noqa: B018 (a command that does not parse is a UserError)
        check_output_dir(self.out_dir, "--out")  # created with the first game's file, not before

    def _device_checks(self) -> list[tuple[bool, str]]:
        if not self.devices:
            return []
        n = len(self.devices)
        one_each = f"--devices: {n} devices need --processes >= {n} (a search process feeds one device)"
        return [
            (self.device is None, "--device and --devices: give one of them"),
            (self.inference_server != "off", "--devices serves each device from its own inference server"),
            (self.processes >= n, one_each),
        ]

    def _usi_checks(self) -> list[tuple[bool, str]]:
        if self.usi_engine is None:
            unused = self.usi_options or self.usi_byoyomi is not None or self.usi_nodes is not None
            return [(not unused, "--usi-option, --usi-byoyomi and --usi-nodes need --usi-engine")]
        return [
            (bool(self.usi_engine.strip()), "--usi-engine: empty command"),
            (
                (self.usi_byoyomi is None) != (self.usi_nodes is None),
                "--usi-engine needs its time per move: --usi-byoyomi MS or --usi-nodes N (one of them)",
            ),
            (self.usi_byoyomi is None or self.usi_byoyomi >= 0, "--usi-byoyomi must be >= 0"),
            (self.usi_nodes is None or self.usi_nodes >= 1, "--usi-nodes must be >= 1"),
            (0 <= self.usi_fraction <= 1, "--usi-fraction must be in [0, 1]"),
            (self.usi_colour in USI_COLOURS, f"--usi-colour must be one of {', '.join(USI_COLOURS)}"),
            (self.usi_engines >= 1, "--usi-engines must be >= 1"),
            (self.usi_timeout > 0, "--usi-timeout must be > 0"),
        ]

    @property
    def external(self) -> bool:
        """Whether any game is played against the USI engine."""
        return self.usi_engine is not None and self.usi_fraction > 0

    @property
    def capped(self) -> bool:
        """Whether some searches are fast ones (playout-cap randomisation)."""
        return self.full_fraction < 1

    @property
    def fast_search_sims(self) -> int:
        return self.fast_sims or max(self.sims // 8, 2)

    def search_params(self, fast: bool = False) -> GumbelParams:
        """The full search's settings, or with `fast` the fast one's (fewer simulations)."""
        from engine.search.gumbel_search import GumbelParams

        return GumbelParams(
            self.fast_search_sims if fast else self.sims, self.considered, self.c_visit, self.c_scale,
            rescale=self.q_transform == "minmax", policy_target=self.policy_target,
            value_target=self.value_target, max_moves=self.max_moves, leaf_mate_plies=self.leaf_mate_plies,
        )  # fmt: skip


_DEVICE = re.compile(r"(cpu|cuda(:\d+)?)")


def parse_devices(text: str | None, option: str = "--devices") -> list[str]:
    """`cuda:0,cuda:1` -> ['cuda:0', 'cuda:1']; None or '' -> []; anything else is a UserError."""
    devices = [d.strip() for d in (text or "").split(",") if d.strip()]
    for d in devices:
        if not _DEVICE.fullmatch(d):
            raise UserError(f"{option}: {d!r} is not a device (cpu, cuda or cuda:N, comma-separated)")
    return devices


EvaluatorFactory = Callable[[int], "Evaluator"]  # max_batch -> evaluator (picklable for the server)

OnGame = Callable[[int, int | None, int], None]  # (positions, result byte or None if dropped, opponent)
