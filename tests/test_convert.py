"""Converters (CSA, hcpe3, cache, seed .data) and the bin/convert command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cshogi
import numpy as np
import pytest
from cshogi.dlshogi import make_move_label

from engine.core.rules import BLACK_WIN, DRAW, MAX_MOVES, NYUGYOKU, SENNICHITE, WHITE_WIN
from engine.errors import UserError
from engine.records.formats import DATA, MOVE_INFO, MOVE_VISITS, Hcpe3Game
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import write_data, write_hcpe3_games
from train.data import convert
from train.data.csa import parse_csa
from train.data.hcpe3_cache import Hcpe3Cache
from train.data.readers import iter_hcpe3_positions

ROOT = Path(__file__).resolve().parent.parent


def random_moves(seed: int, plies: int) -> list[int]:
    """Random legal moves from the start position (fixed seed); stops early at mate."""
    rng = np.random.default_rng(seed)
    board = cshogi.Board()
    moves = []
    for _ in range(plies):
        legal = list(board.legal_moves)
        if not legal:
            break
        moves.append(legal[rng.integers(len(legal))])
        board.push(moves[-1])
    return moves


def csa_text(
    moves: list[int],
    endgame: str = "%TORYO",
    ratings: tuple[float, float] | None = None,
    scores: bool = False,
    extra: list[str] | None = None,
) -> str:
    """A CSA record of `moves`; scores (`'** s`, Black's view) are 10 * ply when asked for."""
    lines = ["V2.2", "N+black", "N-white"]
    if ratings:
        lines += [f"'black_rate:black:{ratings[0]}", f"'white_rate:white:{ratings[1]}"]
    lines += ["PI", "+"]
    for i, move in enumerate(moves):
        lines.append("+-"[i % 2] + cshogi.move_to_csa(move))
        if scores:
            lines.append(f"'** {10 * i} 7g7f")
    lines += extra or []
    if endgame:
        lines.append(endgame)
    return "\n".join(lines) + "\n"


def position(board: cshogi.Board) -> str:
    """The sfen without its move number, which hcp does not hold."""
    return board.sfen().rsplit(" ", 1)[0]


def replay(moves: list[int]) -> list[str]:
    board = cshogi.Board()
    sfens = []
    for move in moves:
        sfens.append(position(board))
        board.push(move)
    return sfens


def hcpe_sfens(path: Path) -> list[str]:
    board = cshogi.Board()
    out = []
    for rec in np.fromfile(path, cshogi.HuffmanCodedPosAndEval):
        board.set_hcp(rec["hcp"])
        out.append(position(board))
    return out


def hcpe3_results(path: Path) -> list[int]:
    return [g.result for g in iter_hcpe3_games(path)]


# --- CSA -----------------------------------------------------------------------------------------------


def test_csa_to_hcpe_resignation_with_scores(tmp_path: Path):
    moves = random_moves(1, 21)  # 21 moves: White to move resigns -> Black wins
    (tmp_path / "g.csa").write_text(csa_text(moves, scores=True))
    counts = convert.csa_to_hcpe([tmp_path / "g.csa"], tmp_path / "o.hcpe")
    assert (counts["games"], counts["positions"]) == (1, 21)
    recs = np.fromfile(tmp_path / "o.hcpe", cshogi.HuffmanCodedPosAndEval)
    assert hcpe_sfens(tmp_path / "o.hcpe") == replay(moves)
    assert recs["bestMove16"].astype(np.uint16).tolist() == [cshogi.move16(m) for m in moves]
    assert recs["eval"].tolist() == [10 * i if i % 2 == 0 else -10 * i for i in range(21)]
    assert set(recs["gameResult"].tolist()) == {cshogi.BLACK_WIN}


@pytest.mark.parametrize(
    ("endgame", "plies", "expected"),
    [
        ("%TORYO", 20, WHITE_WIN),
        ("%SENNICHITE", 20, DRAW | SENNICHITE),
        ("%KACHI", 21, WHITE_WIN | NYUGYOKU),
        ("%KACHI", 20, BLACK_WIN | NYUGYOKU),
        ("%JISHOGI", 20, DRAW | MAX_MOVES),
        ("%MAX_MOVES", 20, DRAW | MAX_MOVES),
        ("%ILLEGAL_MOVE", 20, WHITE_WIN),
        ("%TIME_UP", 21, BLACK_WIN),
        ("%+ILLEGAL_ACTION", 20, WHITE_WIN),
        ("%-ILLEGAL_ACTION", 20, BLACK_WIN),
    ],
)
def test_csa_to_hcpe3_result_bits(tmp_path: Path, endgame: str, plies: int, expected: int):
    moves = random_moves(2, plies)
    (tmp_path / "g.csa").write_text(csa_text(moves, endgame))
    convert.csa_to_hcpe3([tmp_path], tmp_path / "o.hcpe3")
    (game,) = list(iter_hcpe3_games(tmp_path / "o.hcpe3"))
    assert game.result == expected
    assert game.moves["selectedMove16"].tolist() == [cshogi.move16(m) for m in moves]
    # one candidate per move: the played move with one visit (a one-hot policy target)
    assert all(c.tolist() == [(cshogi.move16(m), 1)] for c, m in zip(game.candidates, moves, strict=True))


def test_csa_multi_game_file_ratings_and_min_moves(tmp_path: Path):
    games = [
        csa_text(random_moves(3, 30), ratings=(2500, 2400)),
        csa_text(random_moves(4, 30), ratings=(2500, 1900)),
        csa_text(random_moves(5, 30)),
        csa_text(random_moves(6, 8), ratings=(3000, 3000)),
    ]
    path = tmp_path / "multi.csa"
    path.write_text("/\n".join(games))
    counts = convert.csa_to_hcpe3([path], tmp_path / "all.hcpe3")
    assert counts["games"] == 4
    counts = convert.csa_to_hcpe3([path], tmp_path / "rated.hcpe3", min_rating=2000)
    assert (counts["games"], counts["skipped: rating"]) == (2, 2)  # unrated games go too
    counts = convert.csa_to_hcpe3([path], tmp_path / "long.hcpe3", min_rating=2000, min_moves=10)
    assert (counts["games"], counts["skipped: too short"]) == (1, 1)
    (game,) = list(iter_hcpe3_games(tmp_path / "long.hcpe3"))
    assert game.moves["selectedMove16"].tolist() == [cshogi.move16(m) for m in random_moves(3, 30)]


def test_csa_illegal_move_keeps_moves_before_it(tmp_path: Path):
    moves = random_moves(7, 12)
    text = csa_text(moves[:6] + [moves[4]] + moves[6:])  # moves[4] again is Black's move on White's turn
    (tmp_path / "i.csa").write_text(text)
    with pytest.warns(UserWarning, match=r"i\.csa: game 0: illegal move at ply 6"):
        counts = convert.csa_to_hcpe([tmp_path / "i.csa"], tmp_path / "o.hcpe")
    assert counts["positions"] == 6 and counts["truncated: illegal move"] == 1
    assert hcpe_sfens(tmp_path / "o.hcpe") == replay(moves[:6])


def test_csa_position_block_hands_drops_and_windows_text(tmp_path: Path):
    empty = " * " * 9
    rows = [
        "P1-KY-KE-GI-KI-OU-KI-GI-KE-KY",
        "P2 * -HI *  *  *  *  * -KA * ",
        "P3" + "-FU" * 9,
        "P4" + empty,
        "P5" + empty,
        "P6" + empty,
        "P7+FU+FU * +FU+FU+FU+FU+FU+FU",  # Black's 7g pawn is in hand
        "P8 * +KA *  *  *  *  * +HI * ",
        "P9+KY+KE+GI+KI+OU+KI+GI+KE+KY",
    ]
    text = "\n".join(["V2.2", *rows, "P+00FU", "+", "+0075FU,T3", "'** 120", "-3334FU", "%TORYO", ""])
    (record,) = parse_csa(text)
    assert record.sfen == "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PP1PPPPPP/1B5R1/LNSGKGSNL b P 1"
    board = cshogi.Board(record.sfen)
    drop = board.move_from_usi("P*7e")
    board.push(drop)
    assert record.moves == [drop, board.move_from_usi("3c3d")]
    assert record.scores == [120, 0] and record.win == cshogi.WHITE_WIN  # Black, to move, resigned
    moves = random_moves(12, 9)
    (tmp_path / "w.csa").write_bytes(b"\xef\xbb\xbf" + csa_text(moves).replace("\n", "\r\n").encode())
    counts = convert.csa_to_hcpe([tmp_path / "w.csa"], tmp_path / "o.hcpe")  # a BOM and CRLF lines
    assert (counts["games"], counts["positions"]) == (1, 9)


def test_csa_broken_files_in_mixed_folder(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "good.csa").write_text(csa_text(random_moves(8, 10)))
    (tmp_path / "garbage.csa").write_text("this is not\na game record\n")
    (tmp_path / "empty.csa").write_text("")
    (tmp_path / "unfinished.csa").write_text(csa_text(random_moves(9, 10), endgame="%CHUDAN"))
    (tmp_path / "notes.txt").write_text("ignored")
    with pytest.warns(UserWarning) as caught:
        counts = convert.csa_to_hcpe([tmp_path], tmp_path / "o.hcpe")
    messages = " | ".join(str(w.message) for w in caught)
    assert "garbage.csa: game 0 is damaged or not CSA (line 1: unexpected 'this is not')" in messages
    assert "empty.csa: game 0 has no start position" in messages
    assert counts["files"] == 4 and counts["games"] == 1 and counts["skipped: unfinished"] == 1
    with pytest.warns(UserWarning), pytest.raises(UserError, match="no games passed the filters"):
        convert.csa_to_hcpe([tmp_path / "garbage.csa"], tmp_path / "none.hcpe")
    assert not (tmp_path / "none.hcpe").exists()
    with pytest.raises(UserError, match="no such file"):
        convert.csa_to_hcpe([tmp_path / "missing.csa"], tmp_path / "x.hcpe")
    (tmp_path / "nocsa").mkdir()
    with pytest.raises(UserError, match="no CSA files"):
        convert.csa_to_hcpe([tmp_path / "nocsa"], tmp_path / "x.hcpe")


# --- hcpe3 -> hcpe / cache -----------------------------------------------------------------------------


def test_hcpe3_to_hcpe_matches_direct_csa_conversion(tmp_path: Path):
    text = "/\n".join(csa_text(random_moves(s, 25), scores=True) for s in range(3))
    (tmp_path / "g.csa").write_text(text)
    convert.csa_to_hcpe([tmp_path / "g.csa"], tmp_path / "direct.hcpe")
    convert.csa_to_hcpe3([tmp_path / "g.csa"], tmp_path / "g.hcpe3")
    counts = convert.hcpe3_to_hcpe([tmp_path / "g.hcpe3"], tmp_path / "via.hcpe")
    assert counts["positions"] == 75
    assert (tmp_path / "via.hcpe").read_bytes() == (tmp_path / "direct.hcpe").read_bytes()


def test_hcpe3_to_hcpe_skips_moves_without_candidates(tmp_path: Path):
    board = cshogi.Board()
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    moves = random_moves(11, 4)
    infos = np.zeros(4, MOVE_INFO)
    infos["selectedMove16"] = [cshogi.move16(m) for m in moves]
    cands = [np.zeros(0, MOVE_VISITS)] * 2 + [
        np.array([(cshogi.move16(m), 5)], MOVE_VISITS) for m in moves[2:]
    ]
    write_hcpe3_games(tmp_path / "a.hcpe3", [Hcpe3Game(hcp, DRAW, 0, infos, cands)])
    counts = convert.hcpe3_to_hcpe([tmp_path / "a.hcpe3"], tmp_path / "a.hcpe")
    assert (counts["positions"], counts["skipped: no candidates"]) == (2, 2)
    assert hcpe_sfens(tmp_path / "a.hcpe") == replay(moves)[2:]


def test_hcpe3_cache_from_csa_one_hot(tmp_path: Path):
    (tmp_path / "g.csa").write_text(csa_text(random_moves(12, 10)) + "/\n" + csa_text(random_moves(12, 10)))
    convert.csa_to_hcpe3([tmp_path / "g.csa"], tmp_path / "g.hcpe3")
    counts = convert.hcpe3_cache([tmp_path / "g.hcpe3"], tmp_path / "g.cache", average=True)
    assert (counts["positions"], counts["entries"], counts["merged"]) == (20, 10, 10)
    cache = Hcpe3Cache(tmp_path / "g.cache")
    for i, move in enumerate(random_moves(12, 10)):
        _, value, result, move16s, probs = cache.entry(i)
        assert move16s.tolist() == [cshogi.move16(move)] and probs.tolist() == [1.0]
        assert value == 0.5 and result == (0.0 if i % 2 == 0 else 1.0)  # 10 moves: Black resigns


# --- seed .data -> hcpe3 -------------------------------------------------------------------------------


def data_records(seeds_results: list[tuple[int, int, int]]) -> tuple[np.ndarray, list[list[int]]]:
    """Consecutive games as .data records with random policies over the legal moves."""
    rng = np.random.default_rng(0)
    rows, all_moves = [], []
    for seed, plies, result in seeds_results:
        moves = random_moves(seed, plies)
        all_moves.append(moves)
        board = cshogi.Board()
        for move in moves:
            rec = np.zeros(1, DATA)
            board.to_hcp(rec["hcp"][0])
            legal = list(board.legal_moves)
            probs = rng.dirichlet(np.ones(len(legal)))
            for m, p in zip(legal, probs, strict=True):
                rec["policy"][0, make_move_label(m, board.turn)] = p
            rec["result"] = result
            rows.append(rec)
            board.push(move)
    return np.concatenate(rows), all_moves


def test_data_to_hcpe3_rebuilds_games_and_policies(tmp_path: Path):
    recs, games = data_records([(20, 15, 1), (21, 12, 1), (22, 9, 0)])
    write_data(tmp_path / "0001.data", recs)
    counts = convert.data_to_hcpe3([tmp_path], tmp_path / "o.hcpe3")
    assert (counts["games"], counts["positions"]) == (3, 36)
    back = list(iter_hcpe3_games(tmp_path / "o.hcpe3"))
    assert [g.result for g in back] == [1, 1, 0]
    positions = list(iter_hcpe3_positions(tmp_path / "o.hcpe3"))
    assert [p.hcp.tobytes() for p in positions] == [bytes(r) for r in recs["hcp"]]
    for game, moves in zip(back, games, strict=True):
        played = game.moves["selectedMove16"].tolist()
        assert played[:-1] == [cshogi.move16(m) for m in moves[:-1]]
        last = game.candidates[-1]
        assert played[-1] == last["move16"][np.argmax(last["visitNum"])]  # unknown last move: argmax
    board = cshogi.Board()
    for pos, rec in zip(positions, recs, strict=True):
        board.set_hcp(pos.hcp)
        labels = [
            make_move_label(board.move_from_move16(int(m)), board.turn) for m in pos.candidates["move16"]
        ]
        assert len(labels) == len(list(board.legal_moves))
        expected = np.rint(rec["policy"][labels].astype(np.float64) * 65535)
        assert pos.candidates["visitNum"].tolist() == expected.tolist()
    convert.hcpe3_cache([tmp_path / "o.hcpe3"], tmp_path / "o.cache")
    _, _, _, move16s, probs = Hcpe3Cache(tmp_path / "o.cache").entry(0)
    board.set_hcp(recs["hcp"][0])
    labels = [make_move_label(board.move_from_move16(int(m)), board.turn) for m in move16s]
    assert probs == pytest.approx(recs["policy"][0][labels], abs=1e-4)


# --- stats ---------------------------------------------------------------------------------------------


def test_stats_counts(tmp_path: Path):
    text = "/\n".join(
        [
            csa_text(random_moves(30, 10)),
            csa_text(random_moves(31, 20), "%SENNICHITE"),
            csa_text(random_moves(32, 5)),
        ]
    )
    (tmp_path / "g.csa").write_text(text)
    convert.csa_to_hcpe3([tmp_path / "g.csa"], tmp_path / "g.hcpe3")
    convert.csa_to_hcpe([tmp_path / "g.csa"], tmp_path / "g.hcpe")
    s = convert.stats([tmp_path / "g.hcpe3"])
    assert (s["games"], s["positions"], s["black wins"], s["white wins"], s["draws"]) == (3, 35, 1, 1, 1)
    assert s["sennichite"] == 1 and s["average candidates"] == 1.0
    assert (s["moves per game (min)"], s["moves per game (max)"]) == (5, 20)
    both = convert.stats([tmp_path])  # folder: the .hcpe3 and the .hcpe, not the .csa
    assert both["files"] == 2 and both["positions"] == 70
    assert "positions:" in convert.format_counts(s)


# --- command line --------------------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bin" / "convert"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_every_subcommand(tmp_path: Path):
    (tmp_path / "g.csa").write_text(csa_text(random_moves(40, 12), ratings=(2000, 2000)))
    recs, _ = data_records([(41, 6, 2)])
    write_data(tmp_path / "s.data", recs)
    steps = [
        ("csa-to-hcpe", "g.csa", "-o", "a.hcpe", "--min-rating", "1500"),
        ("csa-to-hcpe3", "g.csa", "-o", "a.hcpe3", "--min-moves", "5"),
        ("hcpe3-to-hcpe", "a.hcpe3", "-o", "b.hcpe"),
        ("hcpe3-cache", "a.hcpe3", "-o", "a.cache", "--average", "--temperature", "0.5"),
        ("data-to-hcpe3", "s.data", "-o", "s.hcpe3"),
        ("stats", "a.hcpe3", "s.hcpe3"),
    ]
    for step in steps:
        proc = run_cli(*step, cwd=tmp_path)  # any cwd works: the script finds the repo itself
        assert proc.returncode == 0, proc.stderr
    assert "games:" in proc.stdout and "positions:" in proc.stdout
    assert (tmp_path / "a.hcpe").read_bytes() == (tmp_path / "b.hcpe").read_bytes()
    assert len(Hcpe3Cache(tmp_path / "a.cache")) == 12
    assert len(list(iter_hcpe3_games(tmp_path / "s.hcpe3"))) == 1


def test_cli_errors_are_one_line(tmp_path: Path):
    proc = run_cli("stats", "missing.hcpe3", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("convert: error: missing.hcpe3: no such file")
    (tmp_path / "bad.hcpe").write_bytes(b"\x01" * 380)
    proc = run_cli("stats", "bad.hcpe", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("convert: error: bad.hcpe: not a hcpe file")
