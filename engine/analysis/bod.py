"""A KIF's board diagram (BOD) as an SFEN, for records that start from a position rather than a 手合割.

GUIs write one when a game starts from an edited position: a tsume problem, a mid-game position, a
handicap set up by hand. cshogi's KIF parser reads only 手合割 starts, so the diagram is read here: the
hands (`後手の持駒：飛　角二` ..., `上手`/`下手` in handicap games, `なし` for none, counts in kanji), the
nine rows between the `+---+` lines (`|v香v桂 ・ ...|一`: `v` marks White's pieces), the side to move
(`先手番`/`後手番`, else Black) and `手数＝N` (the diagram is the position after N moves, so the record's
moves are numbered from N + 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PIECES = {
    "歩": "P", "香": "L", "桂": "N", "銀": "S", "金": "G", "角": "B", "飛": "R", "玉": "K", "王": "K",
    "と": "+P", "杏": "+L", "圭": "+N", "全": "+S", "馬": "+B", "龍": "+R", "竜": "+R",
}  # fmt: skip
HAND_ORDER = "RBGSNLP"  # SFEN's order of pieces in hand
HANDS = {"先手の持駒": "b", "下手の持駒": "b", "後手の持駒": "w", "上手の持駒": "w"}
TURNS = {"先手番": "b", "下手番": "b", "後手番": "w", "上手番": "w"}
KANJI_DIGITS = "一二三四五六七八九"
_ROW = re.compile(r"^\s*\|(.*)\|\s*[一二三四五六七八九]?\s*$")
_MOVE_COUNT = re.compile(r"^\s*手数\s*＝\s*(\d+)\s*([▲△☗☖])?")
_BORDER = re.compile(r"^\s*\+-+\+\s*$")
_KANJI_COUNT = re.compile(r"(十)?([一二三四五六七八九])?")
_FILES = re.compile(r"^\s*([１２３４５６７８９]\s*){9}$")


@dataclass(frozen=True)
class Diagram:
    """The diagram's position and the lines it took (0-based), which are then not read as moves."""

    sfen: str
    lines: frozenset[int]


def read_diagram(lines: list[str]) -> Diagram | None:
    """The board diagram among a KIF's lines; None when it has none; ValueError naming the line (1-based)
    of a malformed one."""
    rows: list[str] = []
    hands = {"b": "", "w": ""}
    turn: str | None = None
    moved: str | None = None  # the side to move by 手数＝N's last move mark, when no 先手番/後手番 says
    number = 1
    used: set[int] = set()
    for i, line in enumerate(lines):
        text = line.strip()
        key, colon, value = text.replace(":", "：").partition("：")
        if m := _ROW.match(line):
            rows.append(_row(m.group(1), i + 1))
        elif colon and key in HANDS:
            hands[HANDS[key]] = _hand(value, i + 1)
        elif text in TURNS:
            turn = TURNS[text]
        elif m := _MOVE_COUNT.match(line):
            number = int(m.group(1)) + 1
            moved = {"▲": "w", "☗": "w", "△": "b", "☖": "b"}.get(m.group(2) or "")
        elif not (_BORDER.match(line) or _FILES.match(line)):
            continue
        used.add(i)
    if not rows:
        return None
    if len(rows) != 9:
        raise ValueError(f"the board diagram has {len(rows)} rows, not 9")
    hand = hands["b"].upper() + hands["w"].lower()
    sfen = f"{'/'.join(rows)} {turn or moved or 'b'} {hand or '-'} {number}"
    return Diagram(sfen, frozenset(used))


def _row(cells: str, line: int) -> str:
    """One rank of the diagram in SFEN (files 9 to 1, left to right)."""
    if len(cells) != 18:
        raise ValueError(f"line {line}: a board row needs 9 squares of two characters, got {cells!r}")
    out, empty = "", 0
    for k in range(0, 18, 2):
        side, piece = cells[k], cells[k + 1]
        if piece == "・":
            empty += 1
            continue
        if piece not in PIECES or side not in " v":
            raise ValueError(f"line {line}: {cells[k : k + 2]!r} is not a piece")
        symbol = PIECES[piece]
        out += (str(empty) if empty else "") + (symbol.lower() if side == "v" else symbol)
        empty = 0
    return out + (str(empty) if empty else "")


def _hand(text: str, line: int) -> str:
    """A hand's pieces in SFEN (upper case): `飛　角二　歩十七` (full- or half-width spaces) -> `R2B17P`."""
    counts: dict[str, int] = {}
    for item in text.split():  # str.split also splits at U+3000, the full-width space
        if item == "なし":
            continue
        piece, count = PIECES.get(item[0]), _count(item[1:])
        if piece is None or piece not in HAND_ORDER or count is None:
            raise ValueError(f"line {line}: {item!r} is not a piece in hand")
        counts[piece] = counts.get(piece, 0) + count
    return "".join(f"{n if n > 1 else ''}{p}" for p in HAND_ORDER if (n := counts.get(p, 0)))


def _count(text: str) -> int | None:
    """A count as KIF writes it: '' (one), 二 .. 九, 十, 十一 .. 十八, or digits; None for anything else."""
    if not text:
        return 1
    if text.isdigit():
        return int(text)
    m = _KANJI_COUNT.fullmatch(text)
    if m is None:
        return None
    return (10 if m.group(1) else 0) + (KANJI_DIGITS.index(m.group(2)) + 1 if m.group(2) else 0)
