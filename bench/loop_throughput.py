#!/usr/bin/env python3
"""The learning loop's throughput, read from a run folder's state.json: per generation the self-play
positions (and the policy targets of the self-play window it trained on), the hours of each step, the
positions an hour of the whole generation and each step's share of its time.

  bench/loop_throughput.py runs/loop

A step resumed after a stop counts only the time of its last run (state.json keeps one figure a
step); such generations are marked with *.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.errors import UserError, cli_main  # noqa: E402

STEPS = ("selfplay", "train", "export", "eval")


def rows(state: dict) -> list[dict]:
    """One figure row per generation whose four steps are done."""
    out = []
    for key in sorted((k for k in state["generations"] if k != "0"), key=int):
        gen = state["generations"][key]
        if not all(s in gen for s in STEPS):
            continue
        seconds = {s: float(gen[s].get("seconds") or 0.0) for s in STEPS}
        total = sum(seconds.values())
        sp = gen["selfplay"]
        out.append(
            {
                "generation": int(key),
                "games": sp["games"],
                "positions": sp["positions"],
                "targets": gen["train"].get("selfplay_positions"),
                "hours": total / 3600,
                "per_hour": sp["positions"] / max(total / 3600, 1e-9),
                "shares": {s: seconds[s] / max(total, 1e-9) for s in STEPS},
                "resumed": sp.get("games_this_session", sp["games"]) != sp["games"],
                "accepted": gen["eval"].get("accepted"),
            }
        )
    return out


def report(table: list[dict]) -> list[str]:
    lines = [
        f"{'gen':>4} {'games':>6} {'positions':>9} {'window':>8} {'hours':>6} {'pos/h':>7}  "
        "self-play / train / export / eval  gate"
    ]
    for r in table:
        shares = " / ".join(f"{100 * r['shares'][s]:.0f}%" for s in STEPS)
        gate = {None: "", True: "accepted", False: "rejected"}[r["accepted"]]
        targets = "" if r["targets"] is None else str(r["targets"])
        mark = "*" if r["resumed"] else " "
        lines.append(
            f"{r['generation']:>3}{mark} {r['games']:>6} {r['positions']:>9} {targets:>8} {r['hours']:6.2f} "
            f"{r['per_hour']:7.0f}  {shares:<33} {gate}"
        )
    if table:
        hours = sum(r["hours"] for r in table)
        positions = sum(r["positions"] for r in table)
        lines.append(
            f"all: {positions} positions in {hours:.2f} h, {positions / max(hours, 1e-9):.0f} an hour"
        )
    return lines


@cli_main("bench/loop_throughput.py")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a bin/loop run folder (--dir)")
    a = p.parse_args(argv)
    path = Path(a.run) / "state.json"
    try:
        state = json.loads(path.read_text())
        table = rows(state)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (is {a.run} a bin/loop --dir?)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a loop state file ({e})") from None
    print("\n".join(report(table)) if table else f"{a.run}: no generation finished yet")


if __name__ == "__main__":
    sys.exit(main())
