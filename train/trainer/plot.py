"""The training plots as PNGs, written atomically: a run's metrics (losses, accuracies, learning rate) and
a loop's strength over generations; and the jsonl reader they plot from."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from engine.fileio import atomic_write_bytes  # noqa: E402


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The rows of a jsonl log (metrics.jsonl, generations.jsonl); a torn last line (killed mid-write) is
    ignored, and a missing file has no rows."""
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
    plot_metrics(read_jsonl(jsonl), png)


def plot_strength(rows: list[dict[str, Any]], png: Path) -> None:
    """Elo (with 95% bars) over generations: the chained ladder, vs gen 0, the --anchor generation, the
    --eval-engine, the random-init network and the greedy player."""
    fig, (ax, ax_loss) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    gens = [r["generation"] for r in rows]
    series = [("ladder_elo", "ladder_error95", "ladder (chained vs previous)")]
    series += [(f"vs_{k}", None, f"vs {k}") for k in ("gen0", "anchor", "engine", "random", "greedy")]
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
