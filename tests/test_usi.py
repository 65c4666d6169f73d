"""Drive the real bin/usi_engine through cshogi's USI client (and raw protocol lines)."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import cshogi
import cshogi.cli
import pytest
from cshogi.usi import Engine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.backends.onnx_model import write_onnx
from engine.core.network import build, preset
from engine.core.position import check_sfen, parse_position
from engine.core.score import value_to_eval
from engine.play import timeman
from engine.play.deadlines import MateClock
from engine.play.go import DEFAULT_GO_MS, parse_go, time_budget
from engine.play.options import default_options
from engine.search.control import SearchControl
from tests.usi_helpers import save_material_model, write_random_engine

ENGINE = str(Path(__file__).resolve().parent.parent / "bin" / "usi_engine")
MATE_IN_1 = "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"
MATE_IN_3 = "8k/9/7L1/7s1/9/9/9/9/4K4 b R 1"
NYUGYOKU = "RR2B2B1/PPPPPP2K/9/9/9/9/9/9/k8 b 2G2g4s4n4l12p 1"
CHECKMATED = "4k4/4G4/4P4/9/9/9/9/9/4K4 w 2r2b3g4s4n4l17p 1"  # White to move, mated
MATE_IN_CHECK = "2gS1g1n1/L5k2/2N1L4/1ppp5/1g5P1/9/1P1P2L1L/2+r6/N1+b1KG1Nb w 3Pr3s9p 70"  # White in check
MATED_IN_TWO = "8k/6+R2/p8/9/9/9/9/9/4K4 w G 1"  # White's one move (9c9d) allows G*1b mate; not in check
NO_QUICK_MATE = "1n2k4/l2g1s3/p1ps1p+B2/4p1p2/9/5P1P1/PN2P1P1S/L1P6/1NK5L w RGNL3Prb2gs4p 74"  # df-pn: many s
# Tsume problems as GUIs send them, the attacker (Black) without a king: (sfen, plies, first move). The first
# move is each problem's published one, and the only first move that mates in that many plies (checked
# with cshogi's df-pn over every legal move); the defence may have equal choices, so only the line's
# length and its mate are asserted after it. Sources: tests/data/kif-diagram/README.md.
TSUME = [
    ("4k4/9/4P4/9/9/9/9/9/9 b G2r2b3g4s4n4l17p 1", 1, "G*5b"),  # head gold, the simplest mate
    ("3sks3/9/4+P4/6+B2/9/9/9/9/9 b S2rb4gs4n4l17p 1", 3, "3d5b"),  # kifu_for_iphone.kif
    ("9/7S1/5P1k1/7pP/6P2/9/2B6/9/9 b 2rb4g3s4n4l14p 1", 5, "1d1c+"),  # is-shogi-tsume.kif
    ("6+Pnl/6Sk1/6sp1/9/8P/9/9/9/9 b GS2r2b3gs3n3l15p 1", 7, "S*1c"),  # taichitsume.kif
    ("9/7Lk/6+B2/9/7N+P/9/9/9/9 b 2rb4g4s3n3l17p 1", 9, "2e1c+"),  # kanju-kemuri.kif, its last 9 plies
]
TSUME_NO_MATE = "4k4/9/9/9/9/9/9/9/9 b G2r2b3g4s4n4l18p 1"  # a lone gold cannot mate a bare king
OPTION_DEFAULTS = {o.name: o.default for o in default_options()}
# USI_OwnBook off: where gpsshogi's book is installed it is the default, and these tests are of the search
FAST = {"DNN_Batch_Size": 4, "Backend": "torch", "PV_Interval": 100, "USI_OwnBook": "false"}


def read_until(engine: Engine, prefix: str, timeout: float = 20.0) -> list[str]:
    """Lines up to and including the first starting with `prefix`; kills the engine if it hangs."""
    killer = threading.Timer(timeout, engine.proc.kill)
    killer.start()
    lines = []
    try:
        while True:
            raw = engine.proc.stdout.readline()
            assert raw, f"engine died or hung waiting for {prefix!r}; got {lines}"
            lines.append(raw.decode().strip())
            if lines[-1].startswith(prefix):
                return lines
    finally:
        killer.cancel()


def send(engine: Engine, line: str) -> None:
    engine.proc.stdin.write(line.encode() + b"\n")
    engine.proc.stdin.flush()


def start(options: dict) -> Engine:
    engine = Engine(ENGINE)
    for k, v in options.items():
        engine.setoption(k, v)
    engine.isready()
    return engine


@pytest.fixture(scope="module")
def model(tiny_model) -> Path:
    return tiny_model


@pytest.fixture(scope="module")
def engine(model):
    e = start({"DNN_Model": model, **FAST})
    yield e
    e.quit()


def assert_legal(position_moves: list[str], sfen: str, move: str) -> None:
    board = cshogi.Board(sfen)
    for m in position_moves:
        board.push_usi(m)
    assert move in {cshogi.move_to_usi(m) for m in board.legal_moves}, move


def test_handshake_lists_every_option(engine):
    lines = engine.usi()
    assert any(line.startswith("id name ") for line in lines)
    assert any(line.startswith("id author ") for line in lines)
    for o in default_options():
        assert o.usi_line() in lines
        assert f"type {o.type}" in o.usi_line()
    assert "option name DNN_Batch_Size type spin default 16 min 1 max 1024" in lines
    assert "option name UCT_Threads type spin default 2 min 1 max 16" in lines


@pytest.mark.parametrize(
    "clock,limit_ms",
    [
        ({"btime": 0, "wtime": 0, "byoyomi": 500}, 500),
        ({"btime": 1500, "wtime": 1500}, 1500),  # sudden death, less than the default Time_Margin
        ({"btime": 1000, "wtime": 1000, "binc": 500, "winc": 500}, 1500),  # Fischer
    ],
)
def test_go_returns_legal_move_in_time(engine, clock, limit_ms):
    moves = ["7g7f", "3c3d"]
    engine.usinewgame()
    engine.position(moves)
    t = time.monotonic()
    best, _ = engine.go(**clock)
    elapsed = (time.monotonic() - t) * 1000
    assert_legal(moves, cshogi.STARTING_SFEN, best)
    assert elapsed < limit_ms, f"{elapsed:.0f} ms used of {limit_ms}"


def test_go_nodes_and_info_lines(engine):
    engine.position([])
    infos = []
    best, _ = engine.go(nodes=48, listener=infos.append)
    final = [line for line in infos if line.startswith("info depth")][-1]
    fields = final.split()
    for key in ("depth", "seldepth", "nodes", "nps", "time", "hashfull", "score", "pv"):
        assert key in fields
    assert int(fields[fields.index("nodes") + 1]) >= 48
    assert fields[fields.index("pv") + 1] == best


def test_ponder_then_ponderhit_and_stop(engine):
    engine.setoption("USI_Ponder", "true")
    engine.position(["7g7f"])
    send(engine, "go ponder btime 0 wtime 0 byoyomi 500")
    time.sleep(0.5)
    send(engine, "isready")  # answered while pondering
    lines = read_until(engine, "readyok")
    assert not any(line.startswith("bestmove") for line in lines)  # no bestmove before ponderhit
    t = time.monotonic()
    send(engine, "ponderhit")
    best = read_until(engine, "bestmove")[-1].split()
    assert (time.monotonic() - t) < 0.5
    assert_legal(["7g7f"], cshogi.STARTING_SFEN, best[1])
    if len(best) == 4:
        assert best[2] == "ponder"
        assert_legal(["7g7f", best[1]], cshogi.STARTING_SFEN, best[3])
    # go infinite runs until stop
    send(engine, "go infinite")
    time.sleep(0.3)
    send(engine, "stop")
    assert_legal(["7g7f"], cshogi.STARTING_SFEN, read_until(engine, "bestmove")[-1].split()[1])
    engine.setoption("USI_Ponder", "false")


def assert_mates(sfen: str, line: str) -> None:
    """`line` is legal from `sfen`, every attacking move gives check, and it ends in mate."""
    board = cshogi.Board(sfen)
    for i, usi in enumerate(line.split()):
        assert usi in {cshogi.move_to_usi(m) for m in board.legal_moves}, line
        board.push_usi(usi)
        assert i % 2 or board.is_check(), line
    assert board.is_game_over(), line


def test_go_mate(engine):
    engine.position(sfen="sfen " + MATE_IN_1)
    assert engine.go_mate(2000) == "G*5b"
    engine.position(sfen="sfen " + MATE_IN_3)
    assert engine.go_mate(2000).split() == ["R*1d", "2d1c", "1d1c+"]
    engine.position([])
    assert engine.go_mate(1000) == "nomate"
    engine.position(sfen="sfen " + MATE_IN_3)
    assert engine.go_mate() == "R*1d 2d1c 1d1c+"  # go mate infinite


def test_go_mate_in_check_searches_the_evasions(engine):
    assert cshogi.Board(MATE_IN_CHECK).is_check()
    engine.position(sfen="sfen " + MATE_IN_CHECK)
    assert_mates(MATE_IN_CHECK, engine.go_mate(2000))


@pytest.mark.parametrize(("sfen", "plies", "first"), TSUME, ids=[f"mate-in-{n}" for _, n, _ in TSUME])
def test_go_mate_solves_tsume_without_the_attackers_king(engine, sfen, plies, first):
    engine.position(sfen="sfen " + sfen)
    line = engine.go_mate(10000)
    assert line.split()[0] == first and len(line.split()) == plies, line
    assert_mates(sfen, line)


def test_a_kingless_position_gets_go_mate_and_one_line_for_a_normal_go(engine):
    engine.position(sfen="sfen " + TSUME_NO_MATE)
    assert engine.go_mate(5000) == "nomate"  # proven: df-pn runs out of moves, not of time
    lines: list[str] = []
    engine.position(sfen="sfen " + TSUME[0][0].replace(" b ", " w "))  # the defender to move
    assert engine.go_mate(5000, listener=lines.append) == "nomate"  # Black has no king to mate
    assert "info string go mate: Black has no king to mate" in lines
    lines.clear()
    engine.position(sfen="sfen " + TSUME[0][0])
    assert engine.go(byoyomi=200, listener=lines.append)[0] == "resign"
    errors = [line for line in lines if line.startswith("info string error")]
    assert len(errors) == 1 and "a normal go needs both kings" in errors[0], lines


def _latency(engine: Engine, command: str, answer: str) -> float:
    t = time.monotonic()
    send(engine, command)
    read_until(engine, answer)
    return time.monotonic() - t


def test_stop_ends_mate_search_and_tree_search_at_once(engine):
    """df-pn runs for seconds here; `stop` must not wait for it (the acceptance bound is 0.1 s,
    measured over many stops by tests/test_usi_fuzz.py; this bound only tells a wait from a hang)."""
    engine.position(sfen="sfen " + NO_QUICK_MATE)
    send(engine, "go mate infinite")
    time.sleep(0.5)
    assert _latency(engine, "stop", "checkmate") < 0.5
    send(engine, "go infinite")  # the root mate search runs first, with no deadline while infinite
    time.sleep(0.05)
    assert _latency(engine, "stop", "bestmove") < 0.5


def test_quit_during_go_mate_infinite_exits_at_once(model):
    engine = start({"DNN_Model": model, **FAST})
    engine.position(sfen="sfen " + NO_QUICK_MATE)
    send(engine, "go mate infinite")
    time.sleep(0.3)
    t = time.monotonic()
    send(engine, "quit")
    assert read_until(engine, "checkmate")[-1] == "checkmate timeout"
    assert time.monotonic() - t < 0.5
    engine.proc.wait(timeout=20)


def test_mated_engine_reports_mate_in_minus_plies(engine):
    infos = []
    engine.position(sfen="sfen " + MATED_IN_TWO)  # not in check: each move allows a mate in one
    assert engine.go(byoyomi=500, listener=infos.append)[0] == "9c9d"
    assert "info depth 2 score mate -2 pv 9c9d G*1b" in infos
    infos.clear()
    engine.position(sfen="sfen " + MATE_IN_3, moves=["R*1d"])  # in check: df-pn proves every evasion lost
    assert engine.go(byoyomi=500, listener=infos.append)[0] == "2d1c"
    assert "info depth 2 score mate -2 pv 2d1c 1d1c+" in infos


def test_repetition_win_is_not_reported_as_mate(engine):
    """White checks perpetually; 5i4i repeats the position with White to move: a win, but no mate."""
    engine.position(sfen="sfen 4k4/9/9/9/4+r4/9/9/9/4K4 b - 1", moves="5i4i 5e4e 4i5i 4e5e".split())
    infos = []
    assert engine.go(nodes=64, listener=infos.append)[0] == "5i4i"
    scores = [line.split("score ")[1].split()[:2] for line in infos if " score " in line]
    assert scores and all(kind == "cp" for kind, _ in scores), scores


def test_root_mate_search_plays_the_mate(engine):
    engine.position(sfen="sfen " + MATE_IN_3)
    infos = []
    best, _ = engine.go(byoyomi=1000, listener=infos.append)
    assert best == "R*1d"
    assert any("score mate 3" in line for line in infos)


def test_leaf_mate_probe_option_proves_a_mate_in_the_tree(engine):
    engine.setoption("Mate_Root_Search", 0)  # no df-pn at the root: only the tree's leaves can see it
    try:
        for plies, proven in ((3, True), (1, False)):
            engine.setoption("Mate_Leaf_Search", plies)
            engine.usinewgame()  # a fresh tree: the last search's exact leaves would be reused
            engine.position(sfen="sfen " + MATE_IN_3)
            infos = []
            engine.go(nodes=256, listener=infos.append)
            final = [line.split("score cp ")[1].split()[0] for line in infos if "score cp " in line][-1]
            assert (int(final) == value_to_eval(1.0)) == proven, (plies, infos[-3:])
    finally:
        engine.setoption("Mate_Root_Search", OPTION_DEFAULTS["Mate_Root_Search"])
        engine.setoption("Mate_Leaf_Search", OPTION_DEFAULTS["Mate_Leaf_Search"])


def test_cpu_int8_option_loads_the_quantized_network(model):
    engine = Engine(ENGINE)
    try:
        for k, v in {"DNN_Model": model, "Backend": "onnx", "CPU_Int8": "true", "DNN_Batch_Size": 4}.items():
            engine.setoption(k, v)
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert any(line.startswith("info string backend onnx-cpu-int8") for line in lines), lines
        engine.position(["7g7f"])
        best, _ = engine.go(nodes=32)
        assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)
    finally:
        engine.quit()


def test_uct_threads_keeps_that_many_batches_in_flight(model):
    engine = Engine(ENGINE)
    try:
        for k, v in {"DNN_Model": model, "Backend": "onnx", "UCT_Threads": 3, "DNN_Batch_Size": 4}.items():
            engine.setoption(k, v)
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert "info string UCT_Threads 3: 3 batches in flight of 4 positions, Threads 1 each" in lines, lines
        assert sum(line.startswith("info string backend ") for line in lines) == 1  # said once, not per slot
        engine.position(["7g7f"])
        best, _ = engine.go(byoyomi=300)
        assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)
        engine.setoption("UCT_Threads", 1)  # at once after bestmove: isready reloads, the go does not wait
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert not any("UCT_Threads" in line for line in lines), lines
        assert any(line.startswith("info string backend onnx-cpu") for line in lines), lines
        best, _ = engine.go(nodes=64)
        assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)
    finally:
        engine.quit()


def test_nyugyoku_declaration_and_resign(engine):
    assert cshogi.Board(NYUGYOKU).is_nyugyoku()
    engine.position(sfen="sfen " + NYUGYOKU)
    assert engine.go(byoyomi=500)[0] == "win"
    engine.position(sfen="sfen " + CHECKMATED)
    assert engine.go(byoyomi=500)[0] == "resign"
    engine.setoption("Resign_Threshold", 1000)  # every non-won position is hopeless
    engine.position([])
    assert engine.go(byoyomi=500)[0] == "resign"
    engine.setoption("Resign_Threshold", 0)


def test_bad_commands_are_reported_and_change_nothing(engine):
    engine.position(["7g7f"])
    for bad in ["setoption name DNN_Batch_Size value many", "setoption name No_Such_Option value 1"]:
        send(engine, bad)
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert any(line.startswith("info string error:") for line in lines), bad
    best, _ = engine.go(nodes=8)
    assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)


@pytest.mark.parametrize(
    "bad",
    [
        "position startpos moves 7g7f 7g7f",  # illegal move
        "position startpos moves 7g7f+",  # promotion outside the zone
        "position sfen lnsgkgsnl/9 b - 1",  # would abort cshogi
        "position sfen xx",
    ],
)
def test_after_a_rejected_position_go_resigns(engine, bad):
    """The last good position may be the other side's: never play a move for it."""
    engine.position(["7g7f"])
    send(engine, bad)
    send(engine, "go btime 0 wtime 0 byoyomi 300")
    lines = read_until(engine, "bestmove")
    assert lines[-1] == "bestmove resign"
    assert any(line.startswith("info string error: position:") for line in lines)
    engine.position(["7g7f"])  # a good position clears it
    assert_legal(["7g7f"], cshogi.STARTING_SFEN, engine.go(nodes=8)[0])


def test_go_with_bad_arguments_still_answers_bestmove(engine):
    engine.position(["7g7f"])
    for go in ["go byoyomi soon", "go btime 1000 wtime x byoyomi 200", "go searchmoves 3c3d byoyomi 200"]:
        send(engine, go)
        lines = read_until(engine, "bestmove", timeout=DEFAULT_GO_MS / 1000 + 10)
        assert any(line.startswith("info string warning: go") for line in lines), go
        assert_legal(["7g7f"], cshogi.STARTING_SFEN, lines[-1].split()[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40),
            st.builds(
                " ".join,
                st.lists(
                    st.sampled_from(
                        [
                            "position",
                            "startpos",
                            "sfen",
                            "moves",
                            "7g7f",
                            "setoption",
                            "name",
                            "value",
                            "DNN_Batch_Size",
                            "go",
                            "mate",
                            "btime",
                            "-5",
                            "0",
                            "9999999999",
                            "usinewgame",
                            "gameover",
                            "stop",
                            "ponderhit",
                            "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL",
                            "b",
                            "-",
                            "1",
                            "P*5e",
                            "Threads",
                            "Search_Mode",
                            "policy",
                            "win",
                        ]  # fmt: skip
                    ),
                    max_size=8,
                ),
            ),
        ),
        max_size=5,
    )
)
def test_garbage_never_kills_the_engine(engine, lines):
    for line in lines:
        if line.split()[:1] == ["go"]:
            continue  # a valid go would start a search; covered elsewhere
        if line.split()[:1] in (["quit"], ["setoption"]) and "DNN_Model" in line:
            continue
        send(engine, line.replace("\n", " "))
    send(engine, "stop")
    send(engine, "isready")
    read_until(engine, "readyok")


def test_engine_survives_garbage_then_plays(engine):
    send(engine, "position startpos")
    send(engine, "setoption name Search_Mode value puct")
    send(engine, "setoption name DNN_Batch_Size value 4")
    best, _ = engine.go(nodes=8)
    assert_legal([], cshogi.STARTING_SFEN, best)


def test_broken_model_is_reported_at_isready_and_engine_still_moves(tmp_path):
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a checkpoint")
    engine = Engine(ENGINE)
    try:
        engine.setoption("DNN_Model", bad)
        lines = []
        engine.isready(listener=lines.append)
        assert any(line.startswith("info string error:") and str(bad) in line for line in lines)
        engine.position(["7g7f"])
        best, _ = engine.go(byoyomi=500)
        assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)
    finally:
        engine.quit()


def test_runs_from_any_directory_and_policy_mode(tmp_path, model):
    proc = subprocess.run(
        [sys.executable, ENGINE],
        input=f"setoption name DNN_Model value {model}\nsetoption name Search_Mode value policy\n"
        "isready\nposition startpos\ngo byoyomi 300\nquit\n",
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    best = [line for line in proc.stdout.splitlines() if line.startswith("bestmove")]
    assert len(best) == 1
    assert_legal([], cshogi.STARTING_SFEN, best[0].split()[1])
    assert "Traceback" not in proc.stderr


def test_gumbel_mode_plays_legal_moves(engine):
    engine.setoption("Search_Mode", "gumbel")
    engine.setoption("Gumbel_Simulations", 16)
    engine.position(["2g2f"])
    best, _ = engine.go(byoyomi=2000)
    assert_legal(["2g2f"], cshogi.STARTING_SFEN, best)
    engine.setoption("Search_Mode", "puct")


def test_gumbel_mode_spends_its_clock_not_a_fixed_budget(model):
    """Sequential halving plans its simulations up front: on a clock the engine plans as many as its
    measured speed fits in the time (the first search, with no speed known yet, runs
    Gumbel_Simulations), and it still answers within the clock."""
    engine = start({"DNN_Model": model, **FAST, "Search_Mode": "gumbel", "Gumbel_Simulations": 16})
    nodes = []
    for _ in range(2):
        send(engine, "position startpos")
        sent = time.monotonic()
        send(engine, "go byoyomi 1000")
        lines = read_until(engine, "bestmove")
        assert time.monotonic() - sent < 5.0  # an answer on time, not after a fixed budget's worth
        info = [line.split() for line in lines if line.startswith("info depth")]
        nodes.append(int(info[-1][info[-1].index("nodes") + 1]))
    engine.quit()
    assert nodes[0] == 16
    assert nodes[1] > 4 * 16  # the tiny net searches hundreds of simulations a second here


def test_match_against_random_mover_is_won(tmp_path):
    """A material-counting net + PUCT + mate search beats a random mover every game (a random-init net
    does not: it draws about half its games at the move limit)."""
    model = tmp_path / "material.pt"
    save_material_model(model)
    rnd = write_random_engine(tmp_path / "random_engine")
    options = {
        "DNN_Model": str(model),
        "Const_Playout": "32",
        "PV_Interval": "0",
        **{k: str(v) for k, v in FAST.items()},
    }
    result = cshogi.cli.main(ENGINE, str(rnd), options1=options, games=2, byoyomi=1000, draw=256)
    assert result["engine1_won"] == 2, result


def test_parsers():
    go, warnings = parse_go(["btime", "10", "wtime", "20", "byoyomi", "5"])
    assert go.clock(cshogi.WHITE).remaining == 20 and not warnings
    assert parse_go(["mate", "infinite"])[0].mate == -1
    assert parse_go(["mate"])[0].mate == -1
    assert parse_go(["ponder", "infinite"])[0].ponder
    go, warnings = parse_go(["btime", "wtime", "300", "byoyomi", "soon", "ponder", "depth", "3"])
    assert (go.btime, go.wtime, go.byoyomi, go.ponder) == (None, 300, 0, True)
    assert len(warnings) == 4  # btime without a value, byoyomi soon, depth, 3
    go, warnings = parse_go(["mate", "soon"])
    assert go.mate == DEFAULT_GO_MS and warnings
    sfen, moves = parse_position(["startpos", "moves", "7g7f", "3c3d"])
    assert sfen == cshogi.STARTING_SFEN and len(moves) == 2
    for bad in ["9/9/9/9/9/9/9/9/9 b - 1", "4k4/9/9/9/9/9/9/9/4K4 b 20P 1", "P3k4/9/9/9/9/9/9/9/4K4 b - 1",
                "4k4/9/9/9/9/9/9/9/4K4 x - 1", "4k4/9/9/9/9/9/P8/P8/4K4 b - 1"]:  # fmt: skip
        with pytest.raises(ValueError):
            check_sfen(bad)
    check_sfen(MATE_IN_3)
    with pytest.raises(ValueError, match="exactly one king"):
        check_sfen(TSUME_NO_MATE)
    check_sfen(TSUME_NO_MATE, both_kings=False)  # a tsume problem, for go mate
    for bad in ["9/9/9/9/9/9/9/9/9 b - 1", "4k4/9/9/9/9/9/9/9/3KK4 b - 1"]:
        with pytest.raises(ValueError, match="at most one king"):
            check_sfen(bad, both_kings=False)


@given(
    st.integers(-100, 10**7), st.integers(-100, 10**7), st.integers(-100, 10**5), st.integers(-100, 10**5),
    st.integers(-100, 10**5), st.one_of(st.none(), st.integers(-100, 10**6)), st.integers(1, 500),
    st.integers(0, 5000), st.integers(0, 5000),
)  # fmt: skip
def test_planned_time_never_exceeds_the_clock(btime, wtime, binc, winc, byoyomi, movetime, ply, bm, tm):
    """The hard limit (and the root mate search's deadline inside it) is within what the GUI's clock
    offers now: the side's time plus byoyomi (never the increment, added after the move), or movetime."""
    go, _ = parse_go(f"btime {btime} wtime {wtime} binc {binc} winc {winc} byoyomi {byoyomi}".split())
    go.movetime = movetime
    for turn, left in ((cshogi.BLACK, btime), (cshogi.WHITE, wtime)):
        plan = time_budget(go, turn, ply, bm, tm)
        offered = movetime if movetime is not None else max(left, 0) + max(byoyomi, 0)
        assert timeman.MIN_THINK_MS <= plan.target_ms <= plan.hard_ms <= max(offered, timeman.MIN_THINK_MS)
        control = SearchControl()
        control.hard = control.start + plan.hard_ms / 1000
        assert control.start <= MateClock(control).deadline() <= control.hard


def test_mate_clock_waits_for_ponderhit():
    control = SearchControl(infinite=True)  # pondering: no deadline yet
    clock = MateClock(control)
    assert clock.deadline() is None and not clock.stopped()
    control.infinite, control.hard = False, time.monotonic() + 0.4  # ponderhit: 0.4 s left
    assert time.monotonic() < clock.deadline() <= time.monotonic() + timeman.root_mate_ms(400) / 1000
    control.stopped = True
    assert clock.stopped()


def _imports(commands: str) -> set[str]:
    """Top-level packages the engine imported while it ran `commands` (Python's import log)."""
    argv = [sys.executable, "-X", "importtime", ENGINE]
    proc = subprocess.run(argv, input=commands, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}


def test_handshake_and_an_onnx_model_need_no_torch(tmp_path):
    """Seconds of torch import on a loaded machine must not delay usiok (GUIs time the handshake out),
    and an ONNX model runs on onnxruntime alone."""
    imported = _imports("usi\nquit\n")
    assert "cshogi" in imported and not imported & {"torch", "onnxruntime"}
    onnx = write_onnx(build(preset("tiny"), seed=0), tmp_path / "tiny.onnx")
    imported = _imports(f"setoption name DNN_Model value {onnx}\nisready\nquit\n")
    assert "onnxruntime" in imported and "torch" not in imported


def test_help_prints_usage_without_reading_stdin():
    proc = subprocess.Popen([ENGINE, "--help"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.wait(timeout=30) == 0  # stdin stays open: it must not wait for commands
        assert proc.stdout.read().startswith("usage: usi_engine")
    finally:
        proc.kill()
        proc.stdin.close()
        proc.stdout.close()
