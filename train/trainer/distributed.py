"""Where a training process stands in a torchrun job: its rank, device and AMP dtype, cross-rank sums,
main-rank logging and the signal that asks it to stop."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from engine.console import say
from engine.errors import UserError


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_pref: str | None) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; NCCL on GPU, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    d = Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        use_cuda = torch.cuda.is_available() and not (device_pref or "").startswith("cpu")
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(hours=2))
    return d


def pick_device(pref: str | None, d: Dist) -> torch.device:
    if pref:
        try:
            device = torch.device(pref)
        except RuntimeError:
            raise UserError(f"--device {pref!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"--device {pref}: CUDA is not available on this machine")
        if device.type == "cuda" and d.enabled and device.index is None:
            device = torch.device("cuda", d.local_rank)
        return device
    return torch.device("cuda", d.local_rank) if torch.cuda.is_available() else torch.device("cpu")


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    if mode == "auto":
        return torch.float16 if device.type == "cuda" else None
    if mode == "off":
        return None
    if mode == "fp16" and device.type != "cuda":
        raise UserError("--amp fp16 needs a CUDA device (use bf16 or off on CPU)")
    return torch.float16 if mode == "fp16" else torch.bfloat16


class StopFlag:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second Ctrl-C kills."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if _in_main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        say(f"signal {signum}: stopping after this step and saving a checkpoint")

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def log_main(d: Dist) -> Callable[[str], None]:
    """A logger that prints on rank 0 only, above the progress bar."""

    def log(msg: str) -> None:
        if d.main:
            say(msg)

    return log


def all_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    """`t` summed over the ranks, in place (as it is with one rank)."""
    if d.enabled:
        dist.all_reduce(t)
    return t
