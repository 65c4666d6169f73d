"""The USI answer lines the engine builds outside the search: a search's `info` (one, or one per MultiPV
line), a `bestmove` that needs no network, and an exception as one line for `info string error:`."""

from __future__ import annotations

import cshogi

from engine.core.score import value_to_eval
from engine.search.control import PuctResult, RootLine
from engine.search.multipv import root_lines
from engine.search.puct import Search


def format_info(r: PuctResult, node_limit: int, multipv: int = 0, line: RootLine | None = None) -> str:
    """The `info` line of a search result (score from the root side's view); with `multipv` > 0, the
    line of that rank among the root's moves (`line`: its PV and value; the counts are the search's)."""
    ms = int(r.elapsed * 1000)
    nps = int(r.playouts / r.elapsed) if r.elapsed > 0 else 0
    if line is None:
        pv, value, mate, depth, seldepth = r.pv, r.value, r.mate_plies, r.depth, r.seldepth
    else:
        pv, value, mate = line.pv, line.value, line.mate_plies
        depth, seldepth = len(pv), max(r.seldepth, len(pv))
    score = f"mate {mate}" if mate else f"cp {value_to_eval(value)}"
    head = f"info multipv {multipv}" if multipv else "info"
    text = (
        f"{head} depth {depth} seldepth {seldepth} nodes {r.playouts} nps {nps} time {ms}"
        f" hashfull {min(1000, r.nodes * 1000 // max(node_limit, 1))} score {score}"
    )
    if pv:
        text += " pv " + " ".join(cshogi.move_to_usi(m) for m in pv)
    return text


def info_lines(search: Search | None, r: PuctResult, node_limit: int, multipv: int) -> list[str]:
    """The `info` lines of a search result: one as ever for MultiPV 1 (or without a move), else one per
    root move, best first (engine.search.multipv)."""
    lines = root_lines(search, r, multipv) if search is not None and multipv > 1 else []
    if not lines:
        return [format_info(r, node_limit)]
    return [format_info(r, node_limit, i, line) for i, line in enumerate(lines, 1)]


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
