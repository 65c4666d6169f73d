"""A run's metrics log: metrics.jsonl, its PNG plot and TensorBoard."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.fileio import atomic_write_text
from train.trainer.plot import plot_file


class MetricsLog:
    """metrics.jsonl (one JSON object a line, appended and flushed), the PNG plot and TensorBoard."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, plot_interval: float) -> None:
        self.enabled = enabled
        self.jsonl = run_dir / "metrics.jsonl"
        self.png = run_dir / "metrics.png"
        self.plot_interval = plot_interval
        self._last_plot = 0.0
        self._tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError("--tensorboard: the tensorboard package is not installed") from None
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def drop_after(self, step: int) -> None:
        """Keep only the rows up to `step` (a resumed run's checkpoint): the rows logged after it are
        logged again by the resumed run. A row cut off by a kill goes too. Rewritten atomically."""
        if not (self.enabled and self.jsonl.exists()):
            return
        kept = []
        for line in self.jsonl.read_text().splitlines(keepends=True):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if line.endswith("\n") and isinstance(row, dict) and row.get("step", step + 1) <= step:
                kept.append(line)
        atomic_write_text(self.jsonl, "".join(kept))

    def write(self, row: dict[str, Any], plot: bool = False) -> None:
        if not self.enabled:
            return
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in row.items():
                if k not in ("step", "epoch") and isinstance(v, int | float):
                    self._tb.add_scalar(k, v, row["step"])
        if plot or time.monotonic() - self._last_plot >= self.plot_interval:
            self.plot()

    def plot(self) -> None:
        if self.enabled:
            plot_file(self.jsonl, self.png)
            self._last_plot = time.monotonic()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
