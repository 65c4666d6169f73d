"""The summary of many analysed games (`bin/analyze` on a folder): a table of the games (result, where
each was decided, flagged moves by side, the worst move), one of the players (games, wins, flagged
moves, mean loss a move) and the worst moves of all the games, as Markdown."""

from __future__ import annotations

from engine.analysis.judge import flag_counts, worst_moves

NAME_WIDTH = 28  # a player's name in the tables (engines' id names can be long)


def _short(name: str) -> str:
    name = name or "?"
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _mark(side: str) -> str:
    return "▲" if side == "black" else "△"


def _result(f: dict) -> str:
    if f["winner"]:
        return f"{_mark(f['winner'])} won ({f['end'] or 'no end code'})"
    return f["end"] or "not recorded"


def _move(m: dict) -> str:
    return f"{m['ply']} {_mark(m['side'])}{m['move']} (-{_pct(m['loss'])}, best {m['best'] or '-'})"


def summary_markdown(games: list[dict]) -> str:
    """The summary of these games' figures (judge.judge_game's)."""
    lines = [
        f"# Analysis of {len(games)} games",
        "",
        "| game | ▲ Black | △ White | result | moves | decided at | ▲ mistakes / blunders "
        "| △ mistakes / blunders | worst move |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in games:
        c = flag_counts(f)
        worst = worst_moves(f, 1)
        decided = f"{f['decided']['ply']}" if f["decided"] else "-"
        lines.append(
            f"| {f['name']} | {_short(f['black'])} | {_short(f['white'])} | {_result(f)} | {len(f['moves'])} "
            f"| {decided} | {c['black']['mistake']} / {c['black']['blunder']} "
            f"| {c['white']['mistake']} / {c['white']['blunder']} | {_move(worst[0]) if worst else '-'} |"
        )
    lines += ["", "## Players", ""]
    lines.append("| player | games | won | moves judged | mistakes | blunders | mean loss a move |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, row in _players(games).items():
        mean = row["loss"] / row["moves"] if row["moves"] else 0.0
        lines.append(
            f"| {_short(name)} | {row['games']} | {row['won']} | {row['moves']} | {row['mistake']} "
            f"| {row['blunder']} | {_pct(mean)} |"
        )
    lines += ["", "## Worst moves", "", "| game | move | player | played | best | win before → after |"]
    lines.append("|---|---|---|---|---|---|")
    every = [(f, m) for f in games for m in worst_moves(f, 10)]
    for f, m in sorted(every, key=lambda fm: -fm[1]["loss"])[:10]:
        lines.append(
            f"| {f['name']} | {m['ply']} | {_short(f[m['side']])} ({_mark(m['side'])}) | {m['move']} "
            f"| {m['best'] or '-'} | {_pct(m['win_before'])} → {_pct(m['win_after'])} |"
        )
    return "\n".join(lines) + "\n"


def _players(games: list[dict]) -> dict[str, dict[str, float]]:
    """Per player (by name): games, wins, judged moves, flagged moves and the win probability lost."""
    rows: dict[str, dict[str, float]] = {}
    for f in games:
        for side in ("black", "white"):
            row = rows.setdefault(
                f[side] or side, {"games": 0, "won": 0, "moves": 0, "mistake": 0, "blunder": 0, "loss": 0.0}
            )
            row["games"] += 1
            row["won"] += f["winner"] == side
            for m in f["moves"]:
                if m["side"] == side and m["judged"]:
                    row["moves"] += 1
                    row["loss"] += m["loss"]
                    if m["flag"]:
                        row[m["flag"]] += 1
    return rows
