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

from engine.network import build, preset, save_checkpoint
from engine.position import check_sfen, parse_position
from engine.usi import default_options, parse_go
from tests.usi_helpers import save_material_model, write_random_engine

ENGINE = str(Path(__file__).resolve().parent.parent / "bin" / "usi_engine")
MATE_IN_1 = "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"
MATE_IN_3 = "8k/9/7L1/7s1/9/9/9/9/4K4 b R 1"
NYUGYOKU = "RR2B2B1/PPPPPP2K/9/9/9/9/9/9/k8 b 2G2g4s4n4l12p 1"
CHECKMATED = "4k4/4G4/4P4/9/9/9/9/9/4K4 w 2r2b3g4s4n4l17p 1"  # White to move, mated
FAST = {"DNN_Batch_Size": 4, "Backend": "torch", "PV_Interval": 100}


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
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("usi") / "tiny.pt"
    save_checkpoint(path, build(preset("tiny"), seed=0))
    return path


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
    assert "option name DNN_Batch_Size type spin default 32 min 1 max 1024" in lines


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


def test_go_mate(engine):
    engine.position(sfen="sfen " + MATE_IN_1)
    assert engine.go_mate(2000) == "G*5b"
    engine.position(sfen="sfen " + MATE_IN_3)
    assert engine.go_mate(2000).split() == ["R*1d", "2d1c", "1d1c+"]
    engine.position([])
    assert engine.go_mate(1000) == "nomate"
    engine.position(sfen="sfen " + MATE_IN_3)
    assert engine.go_mate() == "R*1d 2d1c 1d1c+"  # go mate infinite


def test_root_mate_search_plays_the_mate(engine):
    engine.position(sfen="sfen " + MATE_IN_3)
    infos = []
    best, _ = engine.go(byoyomi=1000, listener=infos.append)
    assert best == "R*1d"
    assert any("score mate 3" in line for line in infos)


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
    for bad in [
        "position startpos moves 7g7f 7g7f",  # illegal move
        "position startpos moves 7g7f+",  # promotion outside the zone
        "position sfen lnsgkgsnl/9 b - 1",  # would abort cshogi
        "position sfen xx",
        "setoption name DNN_Batch_Size value many",
        "setoption name No_Such_Option value 1",
        "go byoyomi soon",
    ]:
        send(engine, bad)
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert any(line.startswith("info string error:") for line in lines), bad
    best, _ = engine.go(nodes=8)
    assert_legal(["7g7f"], cshogi.STARTING_SFEN, best)  # the last good position is kept


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
    assert parse_go(["btime", "10", "wtime", "20", "byoyomi", "5"]).clock(cshogi.WHITE).remaining == 20
    assert parse_go(["mate", "infinite"]).mate == -1
    assert parse_go(["ponder", "infinite"]).ponder
    with pytest.raises(ValueError):
        parse_go(["btime"])
    sfen, moves = parse_position(["startpos", "moves", "7g7f", "3c3d"])
    assert sfen == cshogi.STARTING_SFEN and len(moves) == 2
    for bad in ["9/9/9/9/9/9/9/9/9 b - 1", "4k4/9/9/9/9/9/9/9/4K4 b 20P 1", "P3k4/9/9/9/9/9/9/9/4K4 b - 1",
                "4k4/9/9/9/9/9/9/9/4K4 x - 1", "4k4/9/9/9/9/9/P8/P8/4K4 b - 1"]:  # fmt: skip
        with pytest.raises(ValueError):
            check_sfen(bad)
    check_sfen(MATE_IN_3)
