"""The analysed game as a KIF whose move comments carry the analysis, for the GUIs and cshogi's parser.

Each move's comment (the `*` lines after it) holds: a flag as ShogiHome writes it (`【悪手】` mistake,
`【大悪手】` blunder); the engine's view of the position after the move in ShogiGUI's analysis format
(`*解析 ... 評価値 S 読み筋 ▲...`: S from Black's side, a mate as +-30000), which ShogiGUI and ShogiHome
both read into their evaluation graphs; and a line in words: the move's rank among the candidates, the
win probability before and after it, and the engine's best move with its line. The comment before
the first move describes the start position and the run. The file is Shift_JIS (cp932), as .kif files
are; moves and endings use cshogi's KIF notation so that `cshogi.KIF.Parser` reads the moves back.
"""

from __future__ import annotations

import io

import cshogi
import cshogi.KIF

from engine.analysis.judge import DECIDED, KEEP, flag_counts

ENGINE_NAME = "GumbelShogi"
FLAG_WORDS = {"mistake": "悪手", "blunder": "大悪手"}  # ShogiHome's words for these levels
END_WORDS = {
    "%TORYO": "投了",
    "%TSUMI": "詰み",
    "%SENNICHITE": "千日手",
    "%JISHOGI": "持将棋",
    "%MAX_MOVES": "持将棋",
    "%CHUDAN": "中断",
    "%TIME_UP": "切れ負け",
    "%ILLEGAL_MOVE": "反則負け",
    "%KACHI": "入玉勝ち",
}
DRAW_WORDS = {"%SENNICHITE": "千日手", "%JISHOGI": "持将棋", "%MAX_MOVES": "持将棋", "%CHUDAN": "中断"}


def kif_moves(board: cshogi.Board, usi_moves: list[str], prev: int | None = None) -> str:
    """USI moves from `board`'s position in KIF notation with side marks (▲７六歩(77) △３四歩(33) ...);
    the board is left as it was."""
    words = []
    pushed = 0
    for usi in usi_moves:
        move = board.move_from_usi(usi)
        if not move or move not in set(board.legal_moves):
            break
        mark = "▲" if board.turn == cshogi.BLACK else "△"
        words.append(mark + cshogi.KIF.move_to_kif(move, prev))
        board.push(move)
        pushed += 1
        prev = move
    for _ in range(pushed):
        board.pop()
    return " ".join(words)


def _analysis_line(board: cshogi.Board, position: dict) -> str:
    """ShogiGUI's analysis comment for a position (its PV starts with the side to move there)."""
    score = position["cp"]
    line = f"*解析 0 候補1 深さ {len(position['pv'])} ノード数 {position['nodes']} 評価値 {score}"
    pv = kif_moves(board, position["pv"], board.peek() or None)
    return line + (f" 読み筋 {pv}" if pv else "")


def _percent(win: float) -> str:
    return f"{100 * win:.0f}%"


def _move_line(board: cshogi.Board, move: dict, before: dict, candidates: int) -> str:
    """The move in words (the board is at the position before it)."""
    mover = "Black" if move["side"] == "black" else "White"
    played = kif_moves(board, [move["move"]], board.peek() or None)
    if move["rank"]:
        rank = f"rank {move['rank']} of {candidates}"
    else:
        rank = f"not among the {candidates} candidates" if candidates > 1 else "not the engine's move"
    text = (
        f"played {played} ({rank}): {mover} {_percent(move['win_before'])} -> {_percent(move['win_after'])}"
    )
    if move["rank"] != 1 and before["pv"]:
        text += f"; best {kif_moves(board, before['pv'], board.peek() or None)}"
    if not move["judged"]:
        text += " (opening: not judged)"
    return text


def _header(figures: dict) -> list[str]:
    """The header lines, then the start position's comment: the run's settings, the flags, the decision."""
    start = figures["start"]
    if start == cshogi.STARTING_SFEN:
        lines = ["手合割：平手"]
    else:
        lines = cshogi.KIF.board_to_bod(cshogi.Board(start)).split("\n")
    lines += [f"先手：{figures['black']}", f"後手：{figures['white']}"]
    s, th, counts = figures["settings"], figures["settings"]["thresholds"], flag_counts(figures)
    comment = [
        f"analysis: {ENGINE_NAME}, {s['limit']} a position, MultiPV {s['multipv']}; flagged: a move losing "
        f"{_percent(th['mistake'])} of win probability (mistake) or {_percent(th['blunder'])} (blunder)",
        *(
            f"{mark} mistakes {counts[side]['mistake']}, blunders {counts[side]['blunder']}"
            for side, mark in (("black", "▲"), ("white", "△"))
        ),
    ]
    if decided := figures["decided"]:
        comment.append(
            f"decided at move {decided['ply']}: {decided['winner']} {_percent(DECIDED)}, never below "
            f"{_percent(KEEP)} again"
        )
    comment.append(_analysis_line(cshogi.Board(start), figures["positions"][0]))
    return lines + [f"*{line}" for line in comment]


def kif_text(figures: dict) -> str:
    """The whole KIF (the figures are judge.judge_game's)."""
    out = io.StringIO()
    out.write(f"# {figures['name']}: analysed by bin/analyze from {figures['source']}\n")
    out.write("\n".join(_header(figures)) + "\n")
    out.write("手数----指手---------消費時間--\n")
    exporter = cshogi.KIF.Exporter()
    exporter.kifu, exporter.prev_move, exporter.move_number = out, None, 1
    board = cshogi.Board(figures["start"])
    positions = figures["positions"]
    for move in figures["moves"]:
        ply = move["ply"]
        before = positions[ply - 1]
        words = _move_line(board, move, before, max(len(before["candidates"]), 1))
        exporter.move(board.move_from_usi(move["move"]))
        board.push(board.move_from_usi(move["move"]))
        comment = [f"【{FLAG_WORDS[move['flag']]}】"] if move["flag"] else []
        comment += [_analysis_line(board, positions[ply]), words]
        out.write("".join(f"*{line}\n" for line in comment))
    out.write(_ending(figures, len(figures["moves"])))
    return out.getvalue().replace("\n", "\r\n")


def _ending(figures: dict, plies: int) -> str:
    """The end line and the result line, as kifu software writes them (nothing when the record says none)."""
    end = figures["end"]
    word = END_WORDS.get(end or "")
    if word is None:
        return ""
    text = f"{plies + 1:>4} {word}\n"
    if figures["winner"]:
        return text + f"まで{plies}手で{'先手' if figures['winner'] == 'black' else '後手'}の勝ち\n"
    if end in DRAW_WORDS:
        return text + f"まで{plies}手で{DRAW_WORDS[end]}\n"
    return text
