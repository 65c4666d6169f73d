"""bin/train under torchrun, started from a library call: the learning loop's training step across the
GPUs of one host (one DDP process per GPU; gloo processes on a CPU), as `torchrun bin/train` is by hand.

The processes run in a session of their own so that a Ctrl-C in the terminal reaches them once, through
here: SIGINT/SIGTERM to this process are passed on to torchrun, whose processes then checkpoint and stop
(`StopFlag`), and the caller gets the summary of a stopped run to resume from.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.errors import UserError
from train.trainer.config import TrainConfig, train_argv

TRAIN_SCRIPT = Path(__file__).resolve().parent.parent.parent / "bin" / "train"
STDERR_TAIL = 20  # lines kept to name the cause when the processes fail
ERROR_PREFIX = "train: error: "  # how bin/train reports a UserError (engine.errors.cli_main)


def torchrun_command(cfg: TrainConfig, processes: int) -> list[str]:
    """Process i takes cuda:i on a GPU host (`pick_device`), so cfg.device names no index."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        str(TRAIN_SCRIPT),
        *train_argv(cfg),
    ]


@contextmanager
def _forward_signals(proc: subprocess.Popen, received: list[int]) -> Iterator[None]:
    """SIGINT/SIGTERM here -> SIGTERM to `proc` (and listed in `received`); no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _summary(stdout: str) -> dict[str, Any] | None:
    """The JSON summary bin/train prints last (rank 0 prints it)."""
    for line in reversed(stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "steps" in found:
            return found
    return None


def train_processes(cfg: TrainConfig, processes: int) -> dict[str, Any]:
    """`train(cfg)` in `processes` torchrun processes; its messages and progress bar show here."""
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
    errors: list[str] = []  # bin/train's own one-line errors (torchrun's report after them is not shown)
    proc = subprocess.Popen(
        torchrun_command(cfg, processes),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def relay() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            tail.append(line.rstrip())
            if ERROR_PREFIX in line:
                errors.append(line.split(ERROR_PREFIX, 1)[1].strip())
            if not errors and not received:  # after a signal torchrun reports its own shutdown: not shown
                sys.stderr.write(line)
                sys.stderr.flush()

    received: list[int] = []
    relaying = threading.Thread(target=relay, daemon=True)
    relaying.start()
    with _forward_signals(proc, received):
        stdout = proc.stdout.read()  # type: ignore[union-attr]
        proc.wait()
    relaying.join()
    summary = _summary(stdout)
    if summary is not None and (proc.returncode == 0 or not summary.get("finished")):
        return summary
    if received:
        return {"finished": False, "stopped_by": "signal"}
    cause = errors[0] if errors else next((line for line in reversed(tail) if line.strip()), "no message")
    raise UserError(f"training under torchrun ({processes} processes) exited with {proc.returncode}: {cause}")
