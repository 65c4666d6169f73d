"""bin/analyze: a committed match game (a short slice of it) and a USI position line analysed by the real
engine, the KIF read back by cshogi's parser, the JSON's best moves legal, a rerun skipping what is done;
KIFs that start from a board diagram, as other tools wrote them, read as those tools' parsers read them
and analysed; bad inputs refused in one line with nothing written; moves judged and a stopped game
resumed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import cshogi
import cshogi.KIF
import pytest
from tqdm import tqdm

from engine.analysis import run
from engine.analysis.engine import Candidate, Thought
from engine.analysis.judge import judge_game, worst_moves
from engine.analysis.records import Game, read_file, read_games
from engine.analysis.settings import Settings, Thresholds
from engine.core.position import parse_position
from engine.core.score import value_to_eval
from tests.test_bin import IMPORTS_PROBE

REPO = Path(__file__).resolve().parent.parent
ANALYZE = REPO / "bin" / "analyze"
GAME = REPO / "models" / "matches" / "stage9-vs-gps1s" / "game-0012.csa"  # gpsshogi won it
POSITION = "position startpos moves 7g7f 3c3d 2g2f"
DIAGRAMS = REPO / "tests" / "data" / "kif-diagram"  # other tools' KIFs (README.md there)
# (file, start, moves) as other parsers read them: tsshogi's test expectations for the first two and the
# last, json-kifu-format's snapshot (its JKF converted to SFEN and USI) for the rest
READ_BY_OTHERS = [
    ("kfw-handicap-midgame.kif", "lnsg1gsnl/1r4k2/p1ppppp1p/7R1/1p7/9/PPPPPPP1P/1BG6/LNS1KGSNL b Pp 1",
     "3i3h 3a2b 7i6h 7a6b 7g7f 8e8f 8g8f 8b8f P*8g 8f8b 6g6f P*2c 2d2h 7c7d 6h6g 6a7b"),
    ("is-shogi-tsume.kif", "9/7S1/5P1k1/7pP/6P2/9/2B6/9/9 b 2rb4g3s4n4l14p 1", ""),
    ("32ryu-cumbersome.kif", "7kl/5+R1b1/5K1p1/6+R2/9/8b/9/9/9 b 4g4s4n3l17p 1",
     "4b3b 2a1b 3b2c 1b2a 2c3b 2a1b P*1c 1b1c 3b2c"),
    ("kifu_for_iphone.kif", "3sks3/9/4+P4/6+B2/9/9/9/9/9 b S2rb4gs4n4l17p 1", "3d5b 6a5b S*6b"),
    ("shogidokoro.kifu", "4+B2n1/7k1/6pp1/7gp/4P3P/9/9/9/9 b RBSNr3g3s2n4l13p 1",
     "R*5b G*3b B*3a 2b3a 5a4b 3b4b N*4c 3a2b 5b4b+ R*3b S*3a 2b1c G*1b 3b1b 4b1b 1c1b R*3b 1b1c 3b2b+"),
    ("taichitsume.kif", "6+Pnl/6Sk1/6sp1/9/8P/9/9/9/9 b GS2r2b3gs3n3l15p 1",
     "S*1c 2a1c G*1b 2b1b 3b2a 1b2b 3a3b"),
    ("tsshogi-export-bod.kif", "lnsgkgsnl/1r7/pppppp1pp/6p2/9/2P4P1/PP1PPPP1P/1+b5R1/LNSGKGSNL b b 5", ""),
]  # fmt: skip


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ANALYZE), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def csa_slice(path: Path, moves: int) -> Path:
    """The committed game's header and first `moves` moves, resigned after them."""
    lines = GAME.read_text().splitlines()
    kept, count = [], 0
    for line in lines:
        if line[:1] in "+-" and len(line) > 1 and line[1].isdigit():
            if count == moves:
                break
            count += 1
        if not line.startswith("%"):
            kept.append(line)
    path.write_text("\n".join([*kept, "%TORYO"]) + "\n")
    return path


def legal(board: cshogi.Board, usi: str) -> bool:
    return board.move_from_usi(usi) in set(board.legal_moves)


def test_a_committed_game_slice_and_a_position_line(tmp_path, tiny_model):
    record = csa_slice(tmp_path / "slice.csa", 6)
    out = tmp_path / "out"
    flags = [
        "--nodes",
        "16",
        "--multipv",
        "3",
        "--model",
        str(tiny_model),
        "--out",
        str(out),
        "--no-progress",
    ]
    flags += ["--usi-option", "Backend=torch", "--usi-option", "UCT_Threads=1"]
    done = analyze(str(record), POSITION, *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    game = read_games([str(record)])[0]
    assert game.opening_plies == 16 and len(game.moves) == 22  # the match's opening in front

    kif = cshogi.KIF.Parser.parse_file(str(out / "slice.kif"))
    usi = [cshogi.move_to_usi(m) for m in game.moves]
    assert [cshogi.move_to_usi(m) for m in kif.moves] == usi
    assert len(kif.comments) == len(usi) and all("評価値" in c for c in kif.comments)  # one a move
    assert game.winner == cshogi.WHITE  # Black, to move after 22 moves, resigned
    assert kif.names == list(game.names) and kif.win == cshogi.WHITE_WIN
    assert [cshogi.move_to_usi(m) for m in read_games([str(out / "slice.kif")])[0].moves] == usi

    figures = json.loads((out / "slice.json").read_text())
    assert len(figures["positions"]) == len(usi) + 1 and len(figures["moves"]) == len(usi)
    board = cshogi.Board(figures["start"])
    for position, move in zip(figures["positions"], [*usi, None], strict=True):
        assert legal(board, position["best"]) and 1 <= len(position["candidates"]) <= 3
        assert all(legal(board, c["move"]) for c in position["candidates"])
        if move:
            board.push_usi(move)
    assert not any(m["judged"] for m in figures["moves"][:16])
    assert (out / "slice.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "position.json").is_file() and "slice" in (out / "summary.md").read_text()

    last = f"wrote the .kif, .png and .json of 2 games in {out}, and {out}/summary.md"
    assert done.stdout.splitlines()[-1] == last

    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = analyze(str(record), POSITION, *flags, cwd=tmp_path)
    assert again.returncode == 0 and "2 of 2 games already analysed" in again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix != ".md"} == {
        k: v for k, v in stamps.items() if not k.endswith(".md")
    }


@pytest.mark.parametrize(("name", "sfen", "usi"), READ_BY_OTHERS, ids=[r[0] for r in READ_BY_OTHERS])
def test_a_kif_from_a_board_diagram_reads_as_its_writers_parser_reads_it(name, sfen, usi):
    game = read_file(DIAGRAMS / name)[0]
    assert (game.sfen, [cshogi.move_to_usi(m) for m in game.moves]) == (sfen, usi.split())


def test_the_smoke_mate_reads_to_its_three_last_pieces():
    """Kanju's 煙詰 (ぴよ将棋's KIF, CRLF): 117 plies from 31 pieces on the board to a mate with three."""
    game = read_file(DIAGRAMS / "kanju-kemuri.kif")[0]
    board = cshogi.Board(game.sfen)
    for move in game.moves:
        board.push(move)
    pieces = [p for p in board.pieces if p]
    assert (len(game.moves), board.is_game_over(), len(pieces)) == (117, True, 3)


def test_a_diagram_kif_is_analysed_and_its_files_named(tmp_path, tiny_model):
    """A position set up in a GUI (both kings) analysed like any game; the KIF written starts from the same
    diagram; the last line names the three files."""
    out = tmp_path / "out"
    flags = ["--nodes", "16", "--model", str(tiny_model), "--out", str(out), "--no-progress"]
    flags += ["--usi-option", "Backend=torch", "--usi-option", "UCT_Threads=1"]
    done = analyze(str(DIAGRAMS / "32ryu-cumbersome.kif"), *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    stem = out / "32ryu-cumbersome"
    assert done.stdout.splitlines()[-1] == f"wrote {stem}.kif, {stem}.png and {stem}.json"
    figures = json.loads(stem.with_suffix(".json").read_text())
    sfen, usi = READ_BY_OTHERS[2][1:]
    assert figures["start"] == sfen and [m["move"] for m in figures["moves"]] == usi.split()
    again = read_file(stem.with_suffix(".kif"))[0]
    assert (again.sfen, [cshogi.move_to_usi(m) for m in again.moves]) == (sfen, usi.split())


def tsume(tmp: Path) -> str:
    (tmp / "taichitsume.kif").write_bytes((DIAGRAMS / "taichitsume.kif").read_bytes())
    return "taichitsume.kif"


def bad_diagram(tmp: Path) -> str:
    """Kifu for Windows' tsume problem with one row of its board diagram gone."""
    lines = (DIAGRAMS / "taichitsume.kif").read_bytes().decode("cp932").splitlines()
    lines.remove(next(line for line in lines if line.endswith("|五")))
    (tmp / "rows.kif").write_text("\n".join(lines) + "\n", encoding="cp932")
    return "rows.kif"


def damaged(tmp: Path) -> str:
    """The game with its third move replaced by a king's jump."""
    lines = GAME.read_text().splitlines()
    moves = [i for i, line in enumerate(lines) if re.fullmatch(r"[+-]\d{4}[A-Z]{2}", line)]
    lines[moves[2]] = lines[moves[2]][0] + "5955OU"
    (tmp / "damaged.csa").write_text("\n".join(lines) + "\n")
    return "damaged.csa"


def unknown(tmp: Path) -> str:
    (tmp / "notes.txt").write_text("a shogi game I liked\n")
    return "notes.txt"


def empty_folder(tmp: Path) -> str:
    (tmp / "nothing").mkdir()
    (tmp / "nothing" / "readme.md").write_text("no records here\n")
    return "nothing"


def bad_kif(tmp: Path) -> str:
    (tmp / "bad.kif").write_text(
        "手合割：平手\n手数----指手--\n   1 ７六歩(77)\n   2 ５五角(22)\n", encoding="utf-8"
    )
    return "bad.kif"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (damaged, "damaged.csa: move 3 is not a legal move"),
        (unknown, "notes.txt: unknown record format"),
        (empty_folder, "nothing: no records in this folder"),
        (bad_kif, "bad.kif: line 4: '2 ５五角(22)' is not a legal move"),
        (tsume, "taichitsume.kif: a tsume problem (no Black king): the analysis needs both kings"),
        (bad_diagram, "rows.kif: not a readable board diagram (the board diagram has 8 rows, not 9)"),
        (lambda tmp: "missing.csa", "missing.csa: no such file"),
    ],
    ids=["damaged", "unknown-format", "empty-folder", "bad-kif-move", "tsume", "bad-diagram", "missing"],
)
def test_bad_inputs_get_one_line_and_leave_nothing(tmp_path, make, words):
    name = make(tmp_path)
    result = analyze(name, "--out", "out", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"analyze: error: {words}"), result.stderr
    assert not (tmp_path / "out").exists()


def test_flags_are_checked_before_the_heavy_imports(tmp_path):
    for args, status in ((["--help"], 0), (["x.csa", "--multipv", "0"], 2), (["--no-such-flag"], 2)):
        argv = [sys.executable, "-c", IMPORTS_PROBE, str(ANALYZE), *args]
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == status, out.stderr
        assert out.stderr.splitlines()[-1] == "heavy:", out.stderr


# ----- judging, and a stopped game resumed (an engine stand-in: no process) -----


def thought(win: float, move: str, others: tuple[str, ...] = ()) -> Thought:
    """A position's verdict: `win` for the side to move, `move` best, then `others`."""
    return Thought(move, [Candidate(m, value_to_eval(win), None, [m]) for m in (move, *others)], 10)


def test_moves_are_flagged_by_the_win_probability_they_lose():
    sfen, moves = parse_position("startpos moves 7g7f 3c3d 2g2f 8c8d".split())
    game = Game("g", "test", sfen, moves)
    # the side to move's win: Black 0.5, White 0.5, Black 0.75, White 0.4, Black 0.95
    ts = [thought(0.5, "7g7f"), thought(0.5, "8c8d", ("3c3d",)), thought(0.75, "2g2f"), thought(0.4, "9c9d")]
    ts.append(thought(0.95, "2f2e"))
    f = judge_game(game, ts, Thresholds(0.1, 0.2), Settings().record())
    assert [m["loss"] for m in f["moves"]] == pytest.approx([0.0, 0.25, 0.15, 0.35], abs=0.002)
    assert [m["rank"] for m in f["moves"]] == [1, 2, 1, None]
    assert [m["flag"] for m in f["moves"]] == [None, "blunder", None, "blunder"]  # move 3: the engine's own
    assert f["decided"] == {"ply": 4, "winner": "black"}
    assert [m["ply"] for m in worst_moves(f)] == [4, 2]
    game.opening_plies = 2
    f = judge_game(game, ts, Thresholds(0.3, 0.4), Settings().record())
    assert [m["flag"] for m in f["moves"]] == [None, None, None, "mistake"]


class StandIn:
    """The engine as run.analyse_game uses it: the first legal move; Ctrl-C after `stop` calls."""

    def __init__(self, stop: int | None = None) -> None:
        self.calls, self.stop = 0, stop

    def usinewgame(self) -> None:
        pass

    def think(self, sfen: str, moves: list[str], go: str, wait: float) -> Thought:
        if self.calls == self.stop:
            raise KeyboardInterrupt
        self.calls += 1
        board = cshogi.Board(sfen)
        for m in moves:
            board.push_usi(m)
        return thought(0.5, cshogi.move_to_usi(next(iter(board.legal_moves))))


def test_a_stopped_game_goes_on_from_its_last_position(tmp_path):
    game = read_games([POSITION])[0]
    settings = Settings(nodes=16)
    outputs = run.Outputs.of(tmp_path, game.name)
    bar = tqdm(disable=True)
    with pytest.raises(KeyboardInterrupt):
        run.analyse_game(StandIn(stop=2), game, settings, outputs, [], bar)
    assert not outputs.json.exists() and len(run._read_partial(outputs.partial, game, settings)) == 2
    assert run._read_partial(outputs.partial, game, Settings(nodes=17)) == []  # other settings: anew
    engine = StandIn()
    run.analyse_game(engine, game, settings, outputs, run._read_partial(outputs.partial, game, settings), bar)
    assert engine.calls == game.positions - 2 and outputs.done() and not outputs.partial.exists()
