"""The evaluation graph of an analysed game as a PNG: Black's win probability after every move, the
opening shaded, mistakes and blunders marked at the move that made them (labelled ▲/△ and the move
number), dotted lines at the win probability that decides a game, and a line where it was decided.
Written atomically."""

from __future__ import annotations

import io
import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from engine.analysis.judge import DECIDED  # noqa: E402
from engine.fileio import atomic_write_bytes  # noqa: E402

MARKS = {"mistake": ("o", "#e69f00"), "blunder": ("X", "#d55e00")}  # shape, colour (colour-blind safe)


def plot_game(figures: dict, png: str | os.PathLike) -> None:
    """Draw the figures (judge.judge_game's) into `png`."""
    with warnings.catch_warnings():  # a player's name in a script the font lacks: boxes, not a warning
        warnings.simplefilter("ignore", UserWarning)
        data = _render(figures)
    atomic_write_bytes(png, data)


def _render(figures: dict) -> bytes:
    plies = [p["ply"] for p in figures["positions"]]
    wins = [100 * p["win"] for p in figures["positions"]]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.axhline(50, color="#999999", lw=0.8)
    for level in (100 * DECIDED, 100 * (1 - DECIDED)):
        ax.axhline(level, color="#cccccc", lw=0.6, ls=":")
    if figures["opening_plies"]:
        ax.axvspan(0, figures["opening_plies"], color="#eeeeee", label="opening (not judged)")
    ax.fill_between(plies, wins, 50, where=[w >= 50 for w in wins], color="#cfe3f5", interpolate=True)
    ax.fill_between(plies, wins, 50, where=[w < 50 for w in wins], color="#f7d9d0", interpolate=True)
    ax.plot(plies, wins, color="#0b3d6b", lw=1.4)
    for flag, (marker, colour) in MARKS.items():
        moves = [m for m in figures["moves"] if m["flag"] == flag]
        if not moves:
            continue
        xs = [m["ply"] for m in moves]
        ys = [wins[m["ply"]] for m in moves]
        ax.scatter(xs, ys, marker=marker, s=60 if flag == "blunder" else 36, color=colour, zorder=3,
                   label=f"{flag} ({len(moves)})", edgecolors="black", linewidths=0.5)  # fmt: skip
        for m, y in zip(moves, ys, strict=True):
            label = ("▲" if m["side"] == "black" else "△") + str(m["ply"])
            offset = (0, 7 if y < 50 else -12)
            ax.annotate(label, (m["ply"], y), textcoords="offset points", xytext=offset, ha="center",
                        fontsize=7, color=colour)  # fmt: skip
    if decided := figures["decided"]:
        ax.axvline(decided["ply"], color="#333333", lw=1, ls="--", label=f"decided (move {decided['ply']})")
    ax.set_xlim(0, max(plies[-1], 1))
    ax.set_ylim(0, 100)
    ax.set_yticks([0, 25, 50, 75, 100])
    ax.set_xlabel("move")
    ax.set_ylabel("Black's win probability (%)")
    ax.set_title(_title(figures), fontsize=10)
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    ax.grid(axis="x", color="#eeeeee")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _title(figures: dict) -> str:
    black, white = figures["black"] or "Black", figures["white"] or "White"
    result = {"black": "Black won", "white": "White won"}.get(figures["winner"] or "", "no winner recorded")
    return f"{figures['name']}: ▲ {black} vs △ {white} ({result}, {len(figures['moves'])} moves)"
