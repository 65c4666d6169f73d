"""The run's metrics.jsonl as a PNG (losses, accuracies, learning rate), written atomically."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from engine.fileio import atomic_write_bytes  # noqa: E402


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The rows of a metrics.jsonl; a torn last line (killed mid-write) is ignored."""
    rows = []
    p = Path(path)
    if not p.is_file():
        return rows
    for line in p.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def save_figure(fig: plt.Figure, png: str | os.PathLike) -> None:
    """Render and replace `png` atomically (a viewer never sees a half-written plot); closes `fig`."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write_bytes(png, buf.getvalue())


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
    return [s for s, _ in pts], [v for _, v in pts]


def plot_metrics(rows: list[dict], png: str | os.PathLike) -> None:
    fig, (ax_loss, ax_acc, ax_lr) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for key, label in [
        ("policy_loss", "train policy"),
        ("value_loss", "train value"),
        ("test_policy_loss", "test policy"),
        ("test_value_loss", "test value"),
    ]:
        x, y = _series(rows, key)
        if x:
            ax_loss.plot(x, y, label=label, marker="o" if key.startswith("test") else None)
    ax_loss.set_ylabel("loss")
    for key, label in [("test_policy_acc", "test policy"), ("test_value_acc", "test value")]:
        x, y = _series(rows, key)
        if x:
            ax_acc.plot(x, y, label=label, marker="o")
    ax_acc.set_ylabel("accuracy")
    x, y = _series(rows, "lr")
    if x:
        ax_lr.plot(x, y)
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    for ax in (ax_loss, ax_acc):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
        ax.grid(alpha=0.3)
    ax_lr.grid(alpha=0.3)
    save_figure(fig, png)


def plot_file(jsonl: str | os.PathLike, png: str | os.PathLike) -> None:
    plot_metrics(read_metrics(jsonl), png)
