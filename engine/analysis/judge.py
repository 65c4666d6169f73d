"""A game's figures from the engine's view of each position: the evaluation (Black's win probability and
cp), best move and PV of every position; for every move its rank among the candidates, the evaluation
after it and the win probability it cost its player, flagged as a mistake or a blunder past the
thresholds; where the game was decided; the worst moves. These figures are the JSON `bin/analyze`
writes, and what its KIF, graph and summary show.

A move is judged as ShogiHome judges it: by the drop from the engine's evaluation before it (its best
move's) to its evaluation of the position after it, and never when it is the engine's own best move
(the drop then says the search misjudged the position before, typically a mate it found one ply late).
"""

from __future__ import annotations

from dataclasses import asdict

import cshogi

from engine.analysis.engine import Thought
from engine.analysis.records import Game
from engine.analysis.settings import Thresholds

DECIDED = 0.85  # the winner's win probability where the game was decided,
KEEP = 0.75  # never to fall below this again (a passing misjudgement of the loser's does not undecide it)
FLAGS = ("mistake", "blunder")


def _black(value: float, turn: int) -> float:
    return value if turn == cshogi.BLACK else 1.0 - value


def _side(turn: int) -> str:
    return "black" if turn == cshogi.BLACK else "white"


def position_figures(ply: int, turn: int, t: Thought) -> dict:
    """One position's entry: the evaluation from Black's side (win probability, cp; a mate as plies, +
    when Black mates), the best move, its PV and the candidates (each from Black's side too)."""
    sign = 1 if turn == cshogi.BLACK else -1
    mate = None if t.mate is None else sign * t.mate  # 0: over on the board (cp and win say who won)
    return {
        "ply": ply,
        "turn": _side(turn),
        "win": round(_black(t.win, turn), 4),
        "cp": sign * t.cp,
        "mate": mate,
        "best": t.bestmove if t.candidates else None,
        "pv": t.candidates[0].pv if t.candidates else [],
        "nodes": t.nodes,
        "candidates": [
            {"move": c.move, "win": round(_black(c.win, turn), 4), "cp": sign * c.cp, "pv": c.pv}
            for c in t.candidates
        ],
    }


def judge_game(game: Game, thoughts: list[Thought], thresholds: Thresholds, settings: dict) -> dict:
    """The figures of a whole game (one Thought per position, the start's first)."""
    board = cshogi.Board(game.sfen)
    positions, moves = [], []
    for ply, t in enumerate(thoughts):
        positions.append(position_figures(ply, board.turn, t))
        if ply < len(game.moves):
            moves.append(_move_figures(game, ply, board.turn, t, thoughts[ply + 1], thresholds))
            board.push(game.moves[ply])
    wins = [p["win"] for p in positions]
    return {
        "name": game.name,
        "source": game.source,
        "black": game.names[0],
        "white": game.names[1],
        "start": game.sfen,
        "opening_plies": game.opening_plies,
        "end": game.end,
        "winner": None if game.winner is None else _side(game.winner),
        "settings": {**settings, "thresholds": asdict(thresholds)},
        "decided": decided_ply(wins, game.winner),
        "positions": positions,
        "moves": moves,
    }


def _move_figures(game: Game, ply: int, turn: int, before: Thought, after: Thought, th: Thresholds) -> dict:
    """Move ply + 1: its rank among the candidates of the position before it, the mover's win probability
    before (the engine's best) and after it (the next position's evaluation), the loss and its flag."""
    usi = cshogi.move_to_usi(game.moves[ply])
    ranks = [c.move for c in before.candidates]
    win_before = before.win
    win_after = 1.0 - after.win
    loss = max(0.0, win_before - win_after)
    judged = ply >= game.opening_plies
    own = usi == before.bestmove  # the engine's own choice: a loss after it is the engine's misjudgement
    return {
        "ply": ply + 1,
        "move": usi,
        "side": _side(turn),
        "rank": ranks.index(usi) + 1 if usi in ranks else None,
        "best": before.bestmove if before.candidates else None,
        "win_before": round(win_before, 4),  # the mover's
        "win_after": round(win_after, 4),
        "loss": round(loss, 4),
        "judged": judged,  # the opening's moves are not the players'
        "flag": th.flag(loss) if judged and not own else None,
    }


def decided_ply(wins: list[float], winner: int | None) -> dict | None:
    """Where the game was decided: the first position at which the winner (the record's, else the side the
    last evaluation favours) had DECIDED win probability and after which it never fell below KEEP; None
    if the end is not so clear."""
    if winner is None:
        if DECIDED > wins[-1] > 1 - DECIDED:
            return None
        winner = cshogi.BLACK if wins[-1] >= DECIDED else cshogi.WHITE
    own = [w if winner == cshogi.BLACK else 1.0 - w for w in wins]
    if own[-1] < DECIDED:
        return None
    start = len(own) - 1
    while start > 0 and own[start - 1] >= KEEP:
        start -= 1
    ply = next(i for i in range(start, len(own)) if own[i] >= DECIDED)
    return {"ply": ply, "winner": _side(winner)}


def worst_moves(figures: dict, count: int = 3) -> list[dict]:
    """The judged moves other than the engine's best that cost most, worst first (flagged or not)."""
    judged = [m for m in figures["moves"] if m["judged"] and m["move"] != m["best"] and m["loss"] > 0]
    return sorted(judged, key=lambda m: -m["loss"])[:count]


def flag_counts(figures: dict) -> dict[str, dict[str, int]]:
    """{side: {flag: count}} of a game's flagged moves."""
    counts = {side: dict.fromkeys(FLAGS, 0) for side in ("black", "white")}
    for m in figures["moves"]:
        if m["flag"]:
            counts[m["side"]][m["flag"]] += 1
    return counts
