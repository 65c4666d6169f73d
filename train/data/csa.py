"""CSA game records read defensively: this module reads the lines, cshogi.Board plays the moves.

cshogi's `Parser` trusts its input. It plays every move without a legality check and indexes past its
buffers on damaged text: a record cut off inside a move line raises IndexError, and a duplicated
board row, an unknown piece code, a score comment before the first move or an illegal move crash the
interpreter (segfault). Floodgate archives hold such files, and one of them must not end a conversion
of thousands, so the text is read here and a damaged record says why in `CsaRecord.damage`; the
rules (parsing a move, checking it is legal) stay with cshogi.Board. `%TSUMI` (the side to move is
mated) counts as a loss, where cshogi's parser scores it a draw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import cshogi

# CSA piece code -> sfen letter (Black's; White's is the lower case).
_PIECES = {
    "FU": "P", "KY": "L", "KE": "N", "GI": "S", "KI": "G", "KA": "B", "HI": "R", "OU": "K",
    "TO": "+P", "NY": "+L", "NK": "+N", "NG": "+S", "UM": "+B", "RY": "+R",
}  # fmt: skip
_HAND_ORDER = "RBGSNLP"
_FULL_SET = {"P": 18, "L": 4, "N": 4, "S": 4, "G": 4, "B": 2, "R": 2, "K": 2}
_INITIAL = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL"
# Endings: whose loss it is ("mover": the side to move), None for no winner.
ENDINGS = {
    "%TORYO": "mover", "%TIME_UP": "mover", "%ILLEGAL_MOVE": "mover", "%TSUMI": "mover",
    "%KACHI": "other", "%+ILLEGAL_ACTION": "black", "%-ILLEGAL_ACTION": "white",
    "%SENNICHITE": None, "%JISHOGI": None, "%MAX_MOVES": None, "%HIKIWAKE": None,
    "%CHUDAN": None, "%ERROR": None,
}  # fmt: skip
# floodgate's `'summary:REASON:...` comment names some endings the moves do not show.
_SUMMARY = {"illegal move": "%ILLEGAL_MOVE", "max_moves": "%JISHOGI", "abnormal": "%ERROR"}
_MOVE = re.compile(r"([+-])(\d\d\d\d[A-Z][A-Z])(,.*)?")
_SCORE = re.compile(r"'\*\* ([+-]?\d+)")
_NUMBER = re.compile(r"[+-]?\d+(\.\d*)?")


class CsaError(ValueError):
    """A line that cannot be read (damaged, cut off, or not CSA)."""


@dataclass
class CsaRecord:
    """One game: its start position and moves up to the first illegal one."""

    sfen: str = ""  # start position; "" when the record has none
    moves: list[int] = field(default_factory=list)  # legal moves, cshogi's 32-bit encoding
    scores: list[int] = field(default_factory=list)  # per move its `'** N` comment (Black's view), else 0
    endgame: str = ""  # "%TORYO", ...; "" when the record has no end line
    win: int = cshogi.DRAW  # cshogi.BLACK_WIN / WHITE_WIN / DRAW
    ratings: list[float] = field(default_factory=lambda: [0.0, 0.0])  # 0 when not given
    illegal_ply: int | None = None  # the first move that was not legal, if any
    damage: str = ""  # why the record cannot be read (its first bad line), if it cannot


def _row(text: str, rank: int) -> list[str]:
    """The 9 squares (file 9 first) of a `P1`..`P9` line's text."""
    text = text.ljust(27)
    if len(text.rstrip()) > 27:
        raise CsaError(f"rank {rank} has more than 9 squares")
    squares = []
    for i in range(0, 27, 3):
        token = text[i : i + 3]
        if token == " * ":
            squares.append("")
        elif token[0] in "+-" and token[1:] in _PIECES:
            letter = _PIECES[token[1:]]
            squares.append(letter if token[0] == "+" else letter.lower())
        else:
            raise CsaError(f"rank {rank}: bad square {token!r}")
    return squares


def _initial_board() -> list[str]:
    board: list[str] = []
    for rank in _INITIAL.split("/"):
        for ch in rank:
            board.extend([""] * int(ch) if ch.isdigit() else [ch])
    return board


def _pieces(text: str) -> list[tuple[int, int, str]]:
    """(file, rank, CSA piece code) of each 4-character item of a `PI`/`P+`/`P-` line."""
    if len(text) % 4:
        raise CsaError(f"bad piece list {text!r}")
    items = []
    for i in range(0, len(text), 4):
        sq, code = text[i : i + 2], text[i + 2 : i + 4]
        if not sq.isdigit() or code not in _PIECES:
            raise CsaError(f"bad piece {text[i : i + 4]!r}")
        items.append((int(sq[0]), int(sq[1]), code))
    return items


class _Position:
    """The position block: PI or P1..P9 rows, P+/P- pieces, then the side to move."""

    def __init__(self) -> None:
        self.board: list[str] | None = None
        self.initial = False  # the board came from a PI line
        self.rows: set[int] = set()
        self.hands: dict[str, int] = {}

    def line(self, line: str) -> None:
        if line.startswith("PI"):
            if self.board is not None:
                raise CsaError("PI after other position lines")
            self.board, self.initial = _initial_board(), True
            for file, rank, code in _pieces(line[2:]):
                i = self._square(file, rank)
                if self.board[i].upper().lstrip("+") != _PIECES[code]:
                    raise CsaError(f"PI removes {code} from {file}{rank}, which does not hold it")
                self.board[i] = ""
        elif line[1:2].isdigit() and line[1] != "0":
            rank = int(line[1])
            if rank in self.rows or self.initial:
                raise CsaError(f"rank {rank} given twice")
            self.board = self.board or [""] * 81
            self.rows.add(rank)
            self.board[(rank - 1) * 9 : rank * 9] = _row(line[2:], rank)
        elif line[1:2] in ("+", "-"):
            for file, rank, code in _pieces(line[2:]):
                letter = _PIECES[code] if line[1] == "+" else _PIECES[code].lower()
                if (file, rank) == (0, 0):
                    if "+" in letter or letter in "Kk":
                        raise CsaError(f"{code} cannot be in hand")
                    self.hands[letter] = self.hands.get(letter, 0) + 1
                else:
                    self.board = self.board or [""] * 81
                    self.board[self._square(file, rank)] = letter
        else:
            raise CsaError(f"bad position line {line[:12]!r}")

    @staticmethod
    def _square(file: int, rank: int) -> int:
        if not (1 <= file <= 9 and 1 <= rank <= 9):
            raise CsaError(f"no square {file}{rank}")
        return (rank - 1) * 9 + (9 - file)

    def sfen(self, turn: str) -> str:
        """The sfen of the block; CsaError unless it has both kings and no more pieces than a set."""
        if self.board is None or (self.rows and len(self.rows) != 9):
            raise CsaError("the board is incomplete")
        counts: dict[str, int] = {}
        for piece in [p for p in self.board if p] + [p for p, n in self.hands.items() for _ in range(n)]:
            base = piece[-1].upper()
            counts[base] = counts.get(base, 0) + 1
        if self.board.count("K") != 1 or self.board.count("k") != 1:
            raise CsaError("the board needs one king of each side")
        if any(n > _FULL_SET[p] for p, n in counts.items()):
            raise CsaError("more pieces than a set has")
        ranks = []
        for r in range(9):
            text, empty = "", 0
            for piece in self.board[r * 9 : r * 9 + 9]:
                if not piece:
                    empty += 1
                    continue
                text += (str(empty) if empty else "") + piece
                empty = 0
            ranks.append(text + (str(empty) if empty else ""))
        hand = "".join(
            (str(n) if n > 1 else "") + letter
            for letter in _HAND_ORDER + _HAND_ORDER.lower()
            if (n := self.hands.get(letter, 0))
        )
        return f"{'/'.join(ranks)} {'b' if turn == '+' else 'w'} {hand or '-'} 1"


class _Game:
    """Reads one game's lines in order."""

    def __init__(self) -> None:
        self.record = CsaRecord()
        self.position: _Position | None = _Position()
        self.board: cshogi.Board | None = None
        self.turn = cshogi.BLACK  # of the last position, counting illegal moves too (it names the loser)

    def line(self, line: str) -> None:
        head = line[0]
        if head == "'":
            self._comment(line)
        elif head in "VN$T":  # version, names, game information, time: not needed
            return
        elif head == "P":
            if self.position is None:
                raise CsaError("a position line after the moves began")
            self.position.line(line)
        elif line in ("+", "-"):
            self._start(line)
        elif head in "+-":
            self._move(line)
        elif head == "%":
            self._end(line.split(",", 1)[0])
        else:
            raise CsaError(f"unexpected {line[:16]!r}")

    def _start(self, turn: str) -> None:
        if self.position is None:
            raise CsaError("a second side-to-move line")
        self.record.sfen = self.position.sfen(turn)
        try:
            self.board = cshogi.Board(self.record.sfen)
        except (RuntimeError, ValueError) as e:
            raise CsaError(f"cshogi rejects the position ({e})") from None
        self.turn = self.board.turn
        self.position = None

    def _move(self, line: str) -> None:
        m = _MOVE.fullmatch(line)
        if m is None:
            raise CsaError(f"bad move {line[:16]!r}")
        if self.board is None:
            raise CsaError("a move before the position")
        if self.record.endgame:
            raise CsaError("a move after the end of the game")
        rec = self.record
        if rec.illegal_ply is None:
            move = self.board.move_from_csa(m.group(2))
            if m.group(1) == "+-"[self.turn] and move and self.board.is_legal(move):
                self.board.push(move)
                rec.moves.append(move)
                rec.scores.append(0)
            else:
                rec.illegal_ply = len(rec.moves)
        self.turn ^= 1

    def _comment(self, line: str) -> None:
        rec = self.record
        if (m := _SCORE.match(line)) is not None:
            if rec.moves and rec.illegal_ply is None:
                rec.scores[-1] = int(m.group(1))
        elif line.startswith(("'black_rate:", "'white_rate:")):
            _, sep, value = line[12:].partition(":")
            if sep and (n := _NUMBER.match(value)) is not None:
                rec.ratings[line[1] == "w"] = float(n.group(0))
        elif line.startswith("'summary:"):
            ending = _SUMMARY.get(line[9:].split(":", 1)[0])
            if ending is not None and self.board is not None:
                rec.endgame = ending
                rec.win = _winner(ending, self.turn)

    def _end(self, ending: str) -> None:
        if ending not in ENDINGS:
            raise CsaError(f"unknown end {ending[:16]!r}")
        if self.board is None:
            raise CsaError("an end before the position")
        if self.record.endgame:
            raise CsaError("a second end line")
        self.record.endgame = ending
        self.record.win = _winner(ending, self.turn)


def _winner(ending: str, turn: int) -> int:
    loser = ENDINGS[ending]
    if loser is None:
        return cshogi.DRAW
    colour = {"mover": turn, "other": turn ^ 1, "black": cshogi.BLACK, "white": cshogi.WHITE}[loser]
    return cshogi.WHITE_WIN if colour == cshogi.BLACK else cshogi.BLACK_WIN


def parse_csa(text: str) -> list[CsaRecord]:
    """Every game of a CSA text (games separated by `/` lines). A game that cannot be read gets its
    first bad line in `damage`; the games before and after it are read as usual."""
    games = [_Game()]
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if line == "/":
            games.append(_Game())
        elif line and not games[-1].record.damage:
            try:
                games[-1].line(line)
            except CsaError as e:
                games[-1].record.damage = f"line {number}: {e}"
    return [g.record for g in games]
