"""The material-greedy USI player and the match runner (arbitration, records, broken engines)."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cshogi
import cshogi.usi
import pytest

from engine.errors import UserError
from engine.match.arbiter import run_match
from engine.match.greedy_usi import GreedyPlayer, choose_move, move_score
from engine.match.openings import (
    DEFAULT_RANDOM_PLIES,
    Opening,
    book_openings,
    parse_opening,
    random_openings,
    read_openings,
    repeated_games,
)
from engine.play.book import GPSSHOGI_BOOK
from engine.usi_client import EngineSpec, GoLimit, absolute_file_options, started
from tests.test_osl_book import small_book

REPO = Path(__file__).resolve().parent.parent
GREEDY = str(REPO / "bin" / "greedy_usi")
NODES1 = (GoLimit(nodes=1), GoLimit(nodes=1))
RUN = {"capture_output": True, "text": True, "timeout": 60}


def fake_engine(tmp_path: Path, name: str, on_go: str) -> str:
    """A scripted USI engine whose `go` answer is the Python expression `on_go` (board in scope)."""
    path = tmp_path / name
    path.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import sys, cshogi
            board = cshogi.Board()
            for line in sys.stdin:
                w = line.split()
                if not w: continue
                if w[0] == "usi": print("id name {name}\\nusiok", flush=True)
                elif w[0] == "isready": print("readyok", flush=True)
                elif w[0] == "quit": break
                elif w[0] == "position":
                    board = cshogi.Board()
                    for m in w[3:]: board.push_usi(m)
                elif w[0] == "go": print("bestmove " + ({on_go}), flush=True)
            """
        )
    )
    path.chmod(0o755)
    return str(path)


# ----- greedy player -----


def test_greedy_takes_a_free_rook_and_keeps_its_own():
    board = cshogi.Board("4k4/9/9/9/4r4/4S4/9/9/4K4 b - 1")
    assert choose_move(board, random.Random(0)) == "5f5e"
    # Black's rook is attacked by a pawn that a gold defends: it must step away, not take or stay.
    board = cshogi.Board("4k4/9/4g4/4p4/4R4/9/9/9/4K4 b - 1")
    king_move = board.move_from_usi("5i4h")
    assert move_score(board, king_move) == -2 * 990
    assert move_score(board, board.move_from_usi("5e5d")) == 2 * 90 - 2 * 990
    for seed in range(5):
        move = board.move_from_usi(choose_move(board, random.Random(seed)))
        assert cshogi.move_from(move) == cshogi.move_from(board.move_from_usi("5e5f"))
        assert move_score(board, move) >= 0


def test_greedy_mates_in_one_declares_and_resigns():
    board = cshogi.Board("4k4/9/4P4/9/9/9/9/9/4K4 b G 1")
    assert choose_move(board, random.Random(0)) == "G*5b"
    assert choose_move(cshogi.Board("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 2"), random.Random(0)) == "resign"


def test_greedy_reports_bad_positions_and_keeps_the_last_good_one():
    lines: list[str] = []
    player = GreedyPlayer(lines.append)
    player.handle("position startpos moves 7g7f")
    assert player.board.move_number == 2
    for bad in (
        "position sfen x",
        "position startpos moves 7g7e",
        "position",
        "position startpos moves 7g7f+",
    ):
        player.handle(bad)
        assert lines.pop().startswith("info string error")
    assert player.board.move_number == 2


@pytest.mark.timeout(120, method="signal")  # cshogi's client spins forever on a dead engine's output
def test_greedy_speaks_usi_through_cshogi():
    # an engine that dies at start fails here at once, with its stderr, not inside cshogi's client
    started = subprocess.run([GREEDY], input="usi\nquit\n", capture_output=True, text=True, timeout=60)
    assert "usiok" in started.stdout.split("\n"), started.stderr
    engine = cshogi.usi.Engine(GREEDY)
    try:
        assert engine.name == "GreedyMaterial"
        engine.setoption("Seed", 7)
        engine.isready()
        engine.usinewgame()
        board = cshogi.Board()
        for _ in range(6):
            engine.position([cshogi.move_to_usi(m) for m in board.history])
            move, _ = engine.go(byoyomi=100)
            assert board.is_legal(board.move_from_usi(move))
            board.push_usi(move)
    finally:
        engine.quit()


def test_greedy_survives_garbage():
    out = subprocess.run(
        [GREEDY],
        input="usi\nposition sfen nonsense\nposition startpos moves 1a1b\nsetoption name Seed value x\n"
        "isready\nposition startpos\ngo nodes 1\nquit\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and not out.stderr
    assert out.stdout.count("info string error") == 3
    assert out.stdout.strip().splitlines()[-1].startswith("bestmove ")


# ----- openings -----


def test_openings():
    ops = random_openings(5, 4, seed=1)
    assert len(ops) == 5 and len(set(ops)) == 5 and all(len(o.moves) == 4 for o in ops)
    assert ops == random_openings(5, 4, seed=1)
    o = parse_opening("position startpos moves 7g7f 3c3d")
    assert o == Opening("startpos", ("7g7f", "3c3d")) and o.board().move_number == 3
    assert parse_opening(cshogi.STARTING_SFEN).position.startswith("sfen ")
    for bad in ("startpos moves 7g7e", "sfen 9/9 b - 1", "hello"):
        with pytest.raises(ValueError):
            parse_opening(bad)


def test_book_openings_follow_the_games_of_the_book(tmp_path):
    small_book(tmp_path / "b.dat")
    # After 7g7f both replies were played (3 and 3 games); after 2g2f the reply's position has no games:
    # the start's 2g2f (20 games) is drawn too, and then its one reply.
    openings = book_openings(tmp_path / "b.dat", 10, 2, seed=0)
    assert {o.moves for o in openings} == {("7g7f", "3c3d"), ("7g7f", "8c8d"), ("2g2f", "3c3d")}
    assert book_openings(tmp_path / "b.dat", 2, 2, seed=5) == book_openings(tmp_path / "b.dat", 2, 2, seed=5)
    with pytest.raises(UserError, match="no line of the book is 3 moves long"):
        book_openings(tmp_path / "b.dat", 1, 3)


@pytest.mark.skipif(not GPSSHOGI_BOOK.is_file(), reason="Debian's gpsshogi-data is not installed")
def test_openings_from_gpsshogis_book():
    openings = book_openings(GPSSHOGI_BOOK, 40, 16, seed=1)
    assert len({o.moves for o in openings}) == 40 and all(len(o.moves) == 16 for o in openings)
    assert all(o.board().move_number == 17 for o in openings)  # every move replayed legally
    assert sum(o.moves[0] == "7g7f" for o in openings) > 10  # the commonest first move


def test_read_openings_errors(tmp_path):
    good = tmp_path / "ok.txt"
    good.write_text("# comment\nstartpos moves 2g2f\n\n")
    assert read_openings(good) == [Opening("startpos", ("2g2f",))]
    bad = tmp_path / "bad.txt"
    bad.write_text("startpos moves 2g2f\nstartpos moves 9a9z\n")
    with pytest.raises(UserError, match="bad.txt:2"):
        read_openings(bad)
    with pytest.raises(UserError, match="missing"):
        read_openings(tmp_path / "missing")


# ----- matches -----


def test_greedy_beats_first_legal_move_player(tmp_path):
    first = fake_engine(tmp_path, "first", "cshogi.move_to_usi(next(iter(board.legal_moves)))")
    result = run_match(
        [EngineSpec(GREEDY), EngineSpec(first)],
        4,
        limits=NODES1,
        max_moves=256,
        openings=random_openings(2, 2, seed=3),
        csa_dir=tmp_path / "csa",
        sfen_path=tmp_path / "games.sfen",
        progress=False,
    )
    assert result.names == ("GreedyMaterial", "first")
    assert len(result.games) == 4 and [g.black for g in result.games] == [0, 1, 0, 1]
    assert result.wins == 4, result.summary()
    assert result.elo.elo > 0 and result.summary()["reasons"]
    # records replay to the same game end
    lines = (tmp_path / "games.sfen").read_text().splitlines()
    assert len(lines) == 4
    for line, game in zip(lines, result.games, strict=True):
        words = line.split()
        board = cshogi.Board()
        for m in words[words.index("moves") + 1 :]:
            board.push_usi(m)
        assert board.is_game_over() == (game.reason == "checkmate")
    csa = sorted((tmp_path / "csa").glob("*.csa"))
    assert len(csa) == 4
    parsed = cshogi.CSA.Parser.parse_file(str(csa[0]))[0]
    # the record starts after the 2-ply opening, which is named in a comment, not replayed as moves
    assert len(parsed.moves) == len(result.games[0].moves)
    after_opening = cshogi.Board()
    for usi in result.games[0].opening.moves:
        after_opening.push_usi(usi)
    assert parsed.sfen.split()[:3] == after_opening.sfen().split()[:3]  # CSA has no move number


def test_illegal_moves_and_false_declarations_lose(tmp_path):
    illegal = fake_engine(tmp_path, "illegal", '"9a9z" if board.turn else "1a1b"')
    declarer = fake_engine(tmp_path, "declarer", '"win"')
    resigner = fake_engine(tmp_path, "resigner", '"resign"')
    for bad, reason in ((illegal, "illegal move"), (declarer, "illegal declaration"), (resigner, "resign")):
        result = run_match([EngineSpec(GREEDY), EngineSpec(bad)], 2, limits=NODES1, progress=False)
        assert (result.wins, result.losses, result.draws) == (2, 0, 0)
        assert {g.reason for g in result.games} == {reason}


def test_crash_and_hang_lose_and_restart(tmp_path):
    crasher = fake_engine(tmp_path, "crasher", "sys.exit(3)")
    result = run_match([EngineSpec(crasher), EngineSpec(GREEDY)], 2, limits=NODES1, progress=False)
    assert (result.wins, result.losses) == (0, 2) and {g.reason for g in result.games} == {"crash"}
    hanger = fake_engine(tmp_path, "hanger", "__import__('time').sleep(60) or ''")
    result = run_match([EngineSpec(hanger), EngineSpec(GREEDY)], 1, NODES1, timeout=1.0, progress=False)
    assert result.games[0].reason == "timeout" and result.losses == 1


def test_max_moves_is_a_draw():
    result = run_match(
        [EngineSpec(GREEDY), EngineSpec(GREEDY, {"Seed": "1"})], 2, limits=NODES1, max_moves=6, progress=False
    )
    assert result.draws == 2 and all(len(g.moves) == 6 for g in result.games)
    assert result.elo.elo == pytest.approx(0.0)


def test_engine_that_cannot_start_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot start"):
        run_match([EngineSpec(str(tmp_path / "nope")), EngineSpec(GREEDY)], 1, limits=NODES1, progress=False)
    dead = tmp_path / "dead"
    dead.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('boom\\n')\n")
    dead.chmod(0o755)
    with pytest.raises(UserError, match="boom"):
        run_match([EngineSpec(str(dead)), EngineSpec(GREEDY)], 1, limits=NODES1, progress=False)


def test_match_cli(tmp_path):
    cmd = [sys.executable, str(REPO / "bin" / "match"), GREEDY, GREEDY, "--games", "2", "--nodes", "1"]
    out = subprocess.run(
        [*cmd, "--max-moves", "8", "--option2", "Seed=3", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"games": 2' in out.stdout
    relative = subprocess.run(  # a relative engine path works although engines run in their own folder
        [sys.executable, "bin/match", "bin/greedy_usi", "bin/greedy_usi", "--games", "1", "--nodes", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert relative.returncode == 0, relative.stderr
    for extra, message in (
        (["--option1", "Seed"], "NAME=VALUE"),
        (["--games", "0"], "--games must be positive"),
        (["--openings", str(tmp_path / "none")], "--openings"),
        (["--book-openings", str(tmp_path / "none")], "no such file"),
        (["--openings", "x", "--book-openings", "y"], "give one of them"),
    ):
        bad = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr


def test_each_engine_searches_with_its_own_limit(tmp_path):
    """Engines obey different `go` limits (gpsusi aborts on `go nodes`): each gets only its own."""
    first_legal = "cshogi.move_to_usi(next(iter(board.legal_moves)))"
    echo = f"print('info depth 1 score cp ' + w[-1], flush=True) or {first_legal}"  # cp: its go limit
    echo = fake_engine(tmp_path, "echo", echo)
    no_nodes = fake_engine(tmp_path, "no_nodes", f"sys.exit(3) if 'nodes' in w else {first_legal}")
    limits = (GoLimit(nodes=7), GoLimit(byoyomi=40))
    result = run_match([EngineSpec(echo), EngineSpec(echo)], 2, limits, max_moves=8, progress=False)
    for game in result.games:  # engine 0 is Black in game 0, White in game 1
        first, second = ("cp 7", "cp 40") if game.black == 0 else ("cp 40", "cp 7")
        assert game.scores == [first, second] * (len(game.scores) // 2) and len(game.scores) > 4
    cmd = [sys.executable, str(REPO / "bin" / "match"), GREEDY, no_nodes, "--games", "2", "--max-moves", "8"]
    out = subprocess.run([*cmd, "--nodes", "1", "--byoyomi2", "40", "--no-progress"], **RUN)
    assert out.returncode == 0 and '"reasons": {"max moves": 2}' in out.stdout, out.stdout + out.stderr
    crashed = subprocess.run([*cmd, "--nodes", "1", "--no-progress"], **RUN)  # the same limit for both
    assert crashed.returncode == 0 and '"reasons": {"crash": 2}' in crashed.stdout, crashed.stderr
    for extra, message in (
        ([], "match: error: engine 1: give a search limit (--nodes, --depth or --byoyomi)"),
        (["--byoyomi", "100", "--nodes2", "0"], "match: error: engine 2: --nodes2 must be positive, got 0"),
    ):
        bad = subprocess.run([*cmd, *extra], **RUN)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_repeated_games_counts_games_that_replay_an_earlier_start():
    start = [Opening()]
    assert repeated_games(2, start) == 0  # the start position once with each colour
    assert repeated_games(20, start) == 18
    assert repeated_games(20, start, paired=False) == 18
    four = random_openings(4, 3, seed=0)
    assert repeated_games(8, four) == 0 and repeated_games(10, four) == 2
    assert repeated_games(4, four, paired=False) == 0 and repeated_games(5, four, paired=False) == 1
    assert repeated_games(4, [four[0], four[0]]) == 2  # the same line twice in an openings file


def test_match_cli_plays_distinct_openings_by_default_and_warns_when_games_repeat(tmp_path):
    """Deterministic engines from one start replay one game: the default gives every pair of games its
    own random opening; asking for the start position only says so."""
    cmd = [str(REPO / "bin" / "match"), GREEDY, GREEDY, "--nodes", "1", "--max-moves", "6", "--no-progress"]
    sfen = tmp_path / "default.sfen"
    out = subprocess.run(
        [*cmd, "--games", "4", "--sfen", str(sfen)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    games = [line.split()[3:] for line in sfen.read_text().splitlines()]  # after `position startpos moves`
    openings = [tuple(g[:DEFAULT_RANDOM_PLIES]) for g in games]
    assert DEFAULT_RANDOM_PLIES > 0 and len(set(openings)) == 2 and openings[0] == openings[1]
    assert all(len(g) == 6 for g in games)  # played on from the opening to --max-moves (which counts it)
    same = subprocess.run(
        [*cmd, "--games", "4", "--random-plies", "0"], capture_output=True, text=True, timeout=120
    )
    assert same.returncode == 0 and '"games": 4' in same.stdout
    warnings = [line for line in same.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "match: warning: 2 of 4 games start like an earlier one (same opening and colours); deterministic "
        "engines replay them move for move (use --random-plies or --openings)"
    ]


def test_unpaired_matches_give_every_game_its_own_opening(tmp_path):
    """For data generation: a deterministic engine pair would replay a paired opening move for move."""
    openings = random_openings(4, 3, seed=2)
    result = run_match(
        [EngineSpec(GREEDY), EngineSpec(GREEDY)],
        4,
        limits=NODES1,
        max_moves=12,
        openings=openings,
        sfen_path=tmp_path / "games.sfen",
        progress=False,
        paired=False,
    )
    assert [g.opening for g in result.games] == openings
    assert [g.black for g in result.games] == [0, 1, 0, 1]
    paired = run_match(
        [EngineSpec(GREEDY), EngineSpec(GREEDY)], 4, NODES1, max_moves=12, openings=openings, progress=False
    )
    assert [g.opening for g in paired.games] == [openings[0], openings[0], openings[1], openings[1]]


def test_concurrent_games_are_the_same_match(tmp_path):
    """Games played at once by separate engine pairs: each game keeps its number, opening and colours,
    its record its name, whatever order the games end in."""
    openings = random_openings(3, 3, seed=4)
    specs = [EngineSpec(GREEDY), EngineSpec(GREEDY, {"Seed": "1"})]
    kwargs = {"max_moves": 16, "openings": openings, "progress": False}
    three = run_match(specs, 6, NODES1, concurrency=3, csa_dir=tmp_path / "csa", **kwargs)
    assert sorted(g.number for g in three.games) == list(range(6))
    for g in three.games:
        assert (g.opening, g.black) == (openings[g.number // 2], g.number % 2) and g.reason
        record = (tmp_path / "csa" / f"game-{g.number + 1:04d}.csa").read_text()
        assert " ".join(g.opening.moves) in record and len(g.moves) > 0
    assert len(list((tmp_path / "csa").iterdir())) == 6 and sum(three.pentanomial) == 3


def test_interrupting_a_concurrent_match_ends_it_and_its_engines(tmp_path):
    """Ctrl-C while every game waits on a hung engine: bin/match quits the engines (no restarts) and
    exits with the one-line message, long before the move timeout."""
    marks = tmp_path / "marks"
    marks.mkdir()
    pid = "str(__import__('os').getpid())"
    hang = f"open({str(marks)!r} + '/' + {pid}, 'w') and __import__('time').sleep(600)"
    hanger = fake_engine(tmp_path, "hanger", f"{hang} or ''")
    cmd = [sys.executable, str(REPO / "bin" / "match"), hanger, GREEDY, "--nodes", "1", "--games", "4"]
    cmd += ["--concurrency", "2", "--timeout", "300", "--no-progress"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # both games under way: each hanger got a `go` (at most 60 s)
            if len(list(marks.iterdir())) >= 2 or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert len(list(marks.iterdir())) == 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and b"match: interrupted" in err and b"Traceback" not in err, err
    for mark in marks.iterdir():  # the hung engines are gone, and none was started again
        assert not Path(f"/proc/{mark.name}").exists()
    assert len(list(marks.iterdir())) == 2


def test_sennichite_is_the_fourth_occurrence_as_in_real_games():
    """cshogi's is_draw (and searches) call the first repetition a draw; a real game needs four."""
    from collections import Counter

    from engine.core.rules import game_terminal

    board = cshogi.Board()
    seen = Counter([board.zobrist_hash()])
    shuffle = ["5i5h", "5a5b", "5h5i", "5b5a"]
    ends = []
    for cycle in range(3):
        for usi in shuffle:
            board.push_usi(usi)
            seen[board.zobrist_hash()] += 1
            ends.append(game_terminal(board, seen, None))
        assert seen[board.zobrist_hash()] == cycle + 2
    assert ends[:-1] == [None] * 11
    assert ends[-1] is not None and ends[-1].winner is None  # 4th time at the start position: a draw
    # perpetual check: the checking side (Black's rook) loses on the fourth occurrence
    board = cshogi.Board("4k4/9/9/9/9/9/9/9/R3K4 b - 1")
    seen = Counter([board.zobrist_hash()])
    moves = ["9i9a"] + ["5a5b", "9a9b", "5b5a", "9b9a"] * 3  # the check 9i9a recurs at ply 13
    ends = []
    for usi in moves:
        board.push_usi(usi)
        seen[board.zobrist_hash()] += 1
        ends.append(game_terminal(board, seen, None))
    assert ends[:-1] == [None] * (len(moves) - 1)
    assert ends[-1] is not None and ends[-1].winner == cshogi.WHITE


def test_client_reads_score_and_nodes_from_info_lines_not_info_strings(tmp_path):
    say = "print({!r}, flush=True) or "
    lines = ("info depth 2 nodes 345 score cp -12 pv 7g7f", "info string score 9 nodes 9 (a message)")
    talker = fake_engine(tmp_path, "talker", "".join(say.format(s) for s in lines) + '"7g7f"')
    with started([EngineSpec(talker)]) as (engine,):
        engine.position([])
        assert engine.go(byoyomi=100) == ("7g7f", None)
        assert (engine.last_score, engine.last_nodes) == ("cp -12", 345)
    quiet = fake_engine(tmp_path, "quiet", say.format("info string score cp 5 nodes 7") + '"2g2f"')
    with started([EngineSpec(quiet)]) as (engine,):
        engine.position([])
        assert engine.go(byoyomi=100) == ("2g2f", None)
        assert (engine.last_score, engine.last_nodes) == (None, None)


def test_absolute_file_options_only_touch_existing_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "net.onnx").write_bytes(b"")
    options = {
        "DNN_Model": "runs/net.onnx",
        "Other": "/abs/x.onnx",
        "Missing": "runs/no.onnx",
        "Batch": "16",
        "E": "",
    }
    assert absolute_file_options(options) == {**options, "DNN_Model": str(tmp_path / "runs" / "net.onnx")}


def test_our_engine_finds_a_model_relative_to_the_caller_and_its_errors_fail_the_start(
    tmp_path, tiny_model, monkeypatch
):
    """Engines run in their own folder; a relative DNN_Model names the caller's file (a loop with --dir
    runs/x once evaluated engines that had found no model and played first legal moves), and an error our
    engine reports at isready (it answers readyok anyway, for GUIs) is a failure to start, not a match."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(tiny_model, "net.pt")
    engine = str(REPO / "bin" / "usi_engine")
    with started(
        [EngineSpec(engine, {"DNN_Model": "net.pt", "CPU_Int8": "false", "USI_OwnBook": "false"})], 120
    ) as (usi,):
        usi.usinewgame()
        usi.position()
        usi.go(nodes=16)
        assert usi.last_nodes is not None and usi.last_nodes >= 16  # it searched, with the network
    for options, message in (
        ({"DNN_Model": "missing.pt"}, "missing.pt: model not found"),
        ({"Thread": "1"}, "unknown option 'Thread'"),
    ):
        with pytest.raises(UserError, match=message), started([EngineSpec(engine, options)], 120):
            pass
