"""The games `bin/analyze` reads: CSA and KIF files (cshogi's parsers; a KIF's board diagram by
engine.analysis.bod), USI `position` lines (in a file, or given as the argument itself), and folders of
such files (a match's CSA output).

Every record is read whole and replayed move by move before any analysis starts, so a damaged record,
an unknown format or an empty folder is one line naming the file (and the move or line) and nothing is
written. A match's CSA file starts after its opening and names the opening's moves in a comment; the
game is then read from the start position with the opening in front (not judged: the players did not
choose it), so its KIF has the standard start that every KIF reader knows.

A tsume problem's position (the attacker has no king) is read like any other, and refused by read_games:
the engine judges positions with both kings (its `go mate` solves such a problem).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import cshogi
import cshogi.CSA
import cshogi.KIF

from engine.analysis.bod import read_diagram
from engine.core.position import check_sfen, parse_position, sides_without_king
from engine.errors import UserError

RECORD_SUFFIXES = (".csa", ".kif", ".kifu", ".usi", ".sfen")
_KIF_MOVE_LINE = re.compile(r"^\s*[0-9]+\s+\S")
_KIF_END_WORDS = ("中断", "投了", "持将棋", "千日手", "詰み", "切れ負け", "反則勝ち", "反則負け", "入玉勝ち")
_OPENING = re.compile(r"opening: ([0-9a-zA-Z*+ ]+)")
_WINNERS = {cshogi.BLACK_WIN: cshogi.BLACK, cshogi.WHITE_WIN: cshogi.WHITE}
_MOVER_LOSES = ("%TORYO", "%TSUMI", "%TIME_UP", "%ILLEGAL_MOVE")  # the side to move at the end lost
_COLOR_NAMES = ("Black", "White")


@dataclass
class Game:
    """One game to analyse: its start, its legal moves and what the record says about it."""

    name: str  # the stem of its output files
    source: str  # the file it came from (or the argument)
    sfen: str
    moves: list[int]
    names: tuple[str, str] = ("", "")  # Black's, White's
    opening_plies: int = 0  # leading moves the players did not choose (a match's opening): not judged
    end: str | None = None  # how the record ends, as a CSA code (%TORYO, %TSUMI, ...); None: not said
    winner: int | None = None  # cshogi.BLACK or WHITE; None: a draw, or not said

    @property
    def positions(self) -> int:
        return len(self.moves) + 1


def read_games(inputs: list[str]) -> list[Game]:
    """The games of every input (a record file, a folder of them, or a USI position line), each with a
    distinct name; UserError for the first input that cannot be read."""
    games: list[Game] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in RECORD_SUFFIXES)
            if not files:
                raise UserError(f"{path}: no records in this folder ({', '.join(RECORD_SUFFIXES)})")
            for file in files:
                games += read_file(file)
        elif path.is_file():
            games += read_file(path)
        elif text.split()[:1] in (["position"], ["startpos"], ["sfen"]):
            games += _usi_games([text], "position", text)
        else:
            raise UserError(f"{text}: no such file or folder (nor a USI position line)")
    for g in games:
        if missing := sides_without_king(g.sfen):
            raise UserError(
                f"{g.source}: a tsume problem (no {_COLOR_NAMES[missing[0]]} king): the analysis needs both "
                "kings; bin/usi_engine's go mate solves it"
            )
    _distinct_names(games)
    return games


def read_file(path: Path) -> list[Game]:
    """The games of one record file, its format from its name or else its first line."""
    text = _decode(path)
    if not text.strip():
        raise UserError(f"{path}: empty file")
    kind = _format(path, text)
    if kind == "csa":
        return _csa_games(path, text)
    if kind == "kif":
        return [_kif_game(path, text)]
    return _usi_games(text.splitlines(), path.stem, str(path))


def _decode(path: Path) -> str:
    """The file's text: UTF-8 (a .kifu, most new files) or else Shift_JIS (cp932: a classic .kif)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    for encoding in ("utf-8-sig", "cp932"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise UserError(f"{path}: not a text file (neither UTF-8 nor Shift_JIS)")


def _format(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csa":
        return "csa"
    if suffix in (".kif", ".kifu"):
        return "kif"
    if suffix in (".usi", ".sfen"):
        return "usi"
    first = next(line.strip() for line in text.splitlines() if line.strip())
    if first.split()[0] in ("position", "startpos", "sfen"):
        return "usi"
    if re.match(r"^(V2|N[+-]|P[I1-9]|\$|'|[+-]$)", first):
        return "csa"
    if "：" in text and ("手数----" in text or "手合割" in text or "先手" in text):
        return "kif"
    raise UserError(f"{path}: unknown record format (expected CSA, KIF/KIFU or USI position lines)")


def _winner(parsed: int | None, end: str | None, sfen: str, moves: list[int]) -> int | None:
    """The record's winner: as the parser read it, else from the end code and the side to move at the end
    (cshogi leaves it unset for a %TSUMI)."""
    if parsed in _WINNERS:
        return _WINNERS[parsed]
    turn = cshogi.BLACK if (sfen.split()[1] == "b") == (len(moves) % 2 == 0) else cshogi.WHITE
    if end in _MOVER_LOSES:
        return 1 - turn
    return turn if end == "%KACHI" else None


def _start_board(path: Path, sfen: str) -> cshogi.Board:
    """The record's start position (a tsume problem's too); UserError for one cshogi cannot load."""
    try:
        check_sfen(sfen, both_kings=False)  # cshogi aborts the process on a malformed sfen
    except ValueError as e:
        raise UserError(f"{path}: no usable start position ({e})") from None
    return cshogi.Board(sfen)


def _replay(path: Path, sfen: str, moves: list[int], label: str) -> None:
    """UserError naming the first move of `moves` that is not legal from `sfen`."""
    board = _start_board(path, sfen)
    for i, move in enumerate(moves):
        if move not in set(board.legal_moves):
            csa = cshogi.move_to_csa(move) if move else None  # cshogi's parser gives 0 for an impossible move
            raise UserError(f"{path}: {label} {i + 1}{f' ({csa})' if csa else ''} is not a legal move")
        board.push(move)


def _csa_games(path: Path, text: str) -> list[Game]:
    try:
        parsed = cshogi.CSA.Parser.parse_str(text)
    except (ValueError, IndexError, KeyError) as e:
        raise UserError(f"{path}: not a readable CSA record ({e})") from None
    games = []
    for n, p in enumerate(parsed, 1):
        label = "move" if len(parsed) == 1 else f"game {n}, move"
        _replay(path, p.sfen, p.moves, label)
        name = path.stem if len(parsed) == 1 else f"{path.stem}-{n}"
        names = (p.names[0] or "", p.names[1] or "")
        end = p.endgame or None
        winner = _winner(p.win, end, p.sfen, p.moves)
        game = Game(name, str(path), p.sfen, list(p.moves), names, 0, end, winner)
        games.append(_with_opening(game, p.comment or ""))
    return games


def _with_opening(game: Game, comment: str) -> Game:
    """A match's game from the start position, when its comment names an opening that leads to its start."""
    m = _OPENING.search(comment)
    if game.sfen == cshogi.STARTING_SFEN or m is None:
        return game
    try:
        _, opening = parse_position(["startpos", "moves", *m.group(1).split()])
    except ValueError:
        return game
    board = cshogi.Board()
    for move in opening:
        board.push(move)
    if board.sfen().split()[:3] != game.sfen.split()[:3]:
        return game
    game.sfen, game.moves, game.opening_plies = cshogi.STARTING_SFEN, [*opening, *game.moves], len(opening)
    return game


def _kif_game(path: Path, text: str) -> Game:
    """A KIF game: the start position from its board diagram, else its 手合割 (cshogi's parser, which also
    reads the names and the result from the other header lines); the moves read here line by line, so
    that a line that is not a legal move is named (the parser skips it silently). Variations after the
    main line are left."""
    lines = text.splitlines()
    try:
        diagram = read_diagram(lines)
    except ValueError as e:
        raise UserError(f"{path}: not a readable board diagram ({e})") from None
    used = diagram.lines if diagram else frozenset()
    header = [
        line
        for i, line in enumerate(lines)
        if i not in used and not _KIF_MOVE_LINE.match(line) and not (diagram and line.startswith("手合割"))
    ]  # the parser would replay the moves from its own start, and knows no 手合割 of a diagram (その他)
    try:
        p = cshogi.KIF.Parser.parse_str("\n".join(header))
    except (cshogi.KIF.ParserException, ValueError, KeyError, IndexError) as e:
        raise UserError(f"{path}: not a readable KIF record ({e})") from None
    sfen = diagram.sfen if diagram else p.sfen
    board = _start_board(path, sfen)
    moves: list[int] = []
    for number, line in enumerate(lines, 1):
        if line.startswith("変化"):
            break
        if number - 1 in used or not _KIF_MOVE_LINE.match(line) or line.split()[1].startswith(_KIF_END_WORDS):
            continue
        move, _, _ = cshogi.KIF.Parser.parse_move_str(line, board)
        if not move or move not in set(board.legal_moves):
            raise UserError(f"{path}: line {number}: {line.strip()!r} is not a legal move")
        board.push(move)
        moves.append(move)
    names = (p.names[0] or "", p.names[1] or "")
    return Game(
        path.stem, str(path), sfen, moves, names, 0, p.endgame, _winner(p.win, p.endgame, sfen, moves)
    )


def _usi_games(lines: list[str], stem: str, source: str) -> list[Game]:
    """One game per `position ...` line (blank lines and # comments skipped)."""
    found = [(n, line.split()) for n, line in enumerate(lines, 1) if line.strip() and line[0] != "#"]
    games = []
    for n, words in found:
        args = words[1:] if words[0] == "position" else words
        try:
            sfen, moves = parse_position(args, both_kings=False)
        except ValueError as e:
            where = f"{source}: line {n}" if len(lines) > 1 else source
            raise UserError(f"{where}: {e}") from None
        name = stem if len(found) == 1 else f"{stem}-{n}"
        games.append(Game(name, source, sfen, moves))
    if not games:
        raise UserError(f"{source}: no position lines in it")
    return games


def _distinct_names(games: list[Game]) -> None:
    """Games of different folders may share a file name: those get their folder's name in front, and
    numbers if that is not enough."""
    seen: dict[str, int] = {}
    for g in games:
        seen[g.name] = seen.get(g.name, 0) + 1
    used: set[str] = set()
    for g in games:
        name = g.name
        if seen[name] > 1:
            name = f"{Path(g.source).parent.name}_{name}" if Path(g.source).is_file() else name
        base, k = name, 2
        while name in used:
            name, k = f"{base}-{k}", k + 1
        used.add(name)
        g.name = name
