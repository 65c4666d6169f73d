"""The USI answer lines the engine builds outside the search: a search's `info`, a `bestmove` that needs
no network, and an exception as one line for `info string error:`."""

from __future__ import annotations

import cshogi

from engine.core.score import value_to_eval
from engine.search.control import PuctResult


def format_info(r: PuctResult, node_limit: int) -> str:
    """The `info` line of a search result (score from the root side's view)."""
    ms = int(r.elapsed * 1000)
    nps = int(r.playouts / r.elapsed) if r.elapsed > 0 else 0
    score = f"mate {r.mate_plies}" if r.mate_plies else f"cp {value_to_eval(r.value)}"
    line = (
        f"info depth {r.depth} seldepth {r.seldepth} nodes {r.playouts} nps {nps} time {ms}"
        f" hashfull {min(1000, r.nodes * 1000 // max(node_limit, 1))} score {score}"
    )
    if r.pv:
        line += " pv " + " ".join(cshogi.move_to_usi(m) for m in r.pv)
    return line


def safe_move(board: cshogi.Board) -> str:
    """A legal answer without the network: a mate in one, else the first legal move, else resign."""
    if board.is_game_over():
        return "bestmove resign"
    m = 0 if board.is_check() else board.mate_move_in_1ply()
    return f"bestmove {cshogi.move_to_usi(m or next(iter(board.legal_moves)))}"


def one_line(e: BaseException) -> str:
    """An exception's message as one line (its first, at most 300 characters)."""
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
