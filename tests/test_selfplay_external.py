"""Self-play games against an external USI engine (the material-greedy player, or scripted engines that
resign, declare, play illegal moves, crash or hang): records replay legally, targets only on our side."""

import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset, save_checkpoint
from engine.core.rules import NYUGYOKU, RESULT_MASK, terminal
from engine.core.score import value_to_eval
from engine.errors import UserError
from engine.records.formats import OPPONENT_SELFPLAY, OPPONENT_USI_BLACK, OPPONENT_USI_WHITE
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.game import engine_reply_outcome
from engine.selfplay.opponents import engine_colour
from engine.selfplay.processes import run_selfplay
from engine.usi_client import parse_usi_options, usi_score_to_value
from train.data.readers import read_data

REPO = Path(__file__).resolve().parent.parent
GREEDY = str(REPO / "bin" / "greedy_usi")

# A scripted engine: `resign`, `win` and `illegal` answer every go so; `score` is the greedy player
# plus an `info score cp 123` line; `crash` / `hang` play greedily but, once per test (a marker
# file), die or stay silent at their 3rd move.
SCRIPTED = """
import sys
sys.path.insert(0, {repo!r})
mode, marker = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
def out(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
def first_time():
    try:
        open(marker, "x").close()
        return True
    except FileExistsError:
        return False
replies = {{"resign": "resign", "win": "win", "illegal": "5e5d"}}
if mode in replies:
    for line in sys.stdin:
        cmd = line.split()[:1]
        if cmd == ["usi"]:
            out("id name scripted")
            out("usiok")
        elif cmd == ["isready"]:
            out("readyok")
        elif cmd == ["go"]:
            out("bestmove " + replies[mode])
        elif cmd == ["quit"]:
            break
    sys.exit(0)
from engine.match.greedy_usi import GreedyPlayer
player, gos = GreedyPlayer(out), 0
for line in sys.stdin:
    if line.split()[:1] == ["go"]:
        gos += 1
        if gos == 3 and mode == "crash" and first_time():
            sys.exit(1)
        if gos == 3 and mode == "hang" and first_time():
            continue
        if mode == "score":
            out("info depth 1 score cp 123 pv none")
    if not player.handle(line):
        break
"""


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=128)


@pytest.fixture
def scripted(tmp_path):
    path = tmp_path / "scripted_engine.py"
    path.write_text(SCRIPTED.format(repo=str(REPO)))

    def command(mode: str) -> str:
        return f"{sys.executable} {path} {mode} {tmp_path / 'marker'}"

    return command


def config(out: Path, **kw) -> SelfPlayConfig:
    base = dict(
        out_dir=out, games=4, parallel=4, sims=4, considered=4, max_moves=30, seed=1, progress=False,
        usi_engine=GREEDY, usi_nodes=1, usi_engines=2,
    )  # fmt: skip
    return SelfPlayConfig(**{**base, **kw})


def replay(path: Path, max_moves: int, ended_by_engine: bool = False) -> list:
    """Check every game of an hcpe3 file; returns the games. Engine moves: candidateNum 0; ours: the
    legal moves with a normalised policy. The result is the rules' (or, when the engine ended the game
    by resigning, declaring or an illegal move, a win for us)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a partial game would warn
        games = list(iter_hcpe3_games(path))
    for game in games:
        board = cshogi.Board()
        board.set_hcp(game.hcp)
        engine = {OPPONENT_USI_BLACK: cshogi.BLACK, OPPONENT_USI_WHITE: cshogi.WHITE}.get(game.opponent)
        for info, cands in zip(game.moves, game.candidates, strict=True):
            assert terminal(board, max_moves) is None
            move = board.move_from_move16(int(info["selectedMove16"]))
            assert board.is_legal(move)
            if board.turn == engine:
                assert info["candidateNum"] == 0 and len(cands) == 0
            else:
                legal = sorted(cshogi.move16(m) for m in board.legal_moves)
                assert sorted(cands["move16"].tolist()) == legal
                assert abs(cands["visitNum"].sum() / 65535 - 1) <= len(cands) / 65535
            board.push(move)
        end = terminal(board, max_moves)
        if ended_by_engine:
            assert end is None and board.turn == engine
            assert game.result == (1 if engine == cshogi.WHITE else 2)  # the engine lost, no reason bits
        else:
            assert end is not None and end.result == game.result
    return games


def test_games_against_greedy_engine_replay_with_targets_on_our_side_only(evaluator, tmp_path):
    stats = run_selfplay(config(tmp_path), evaluator)
    (path,) = tmp_path.glob("selfplay-*.hcpe3")
    games = replay(path, 30)
    assert sorted(g.opponent for g in games) == [1, 1, 2, 2]  # alternating colours
    assert stats.games == stats.usi_games == 4 and stats.dropped == 0
    assert stats.usi_wins + stats.usi_losses + stats.usi_draws == 4
    assert stats.positions == sum(len(g.moves) for g in games)
    for g in games:  # the greedy player reports no score: eval 0 on its moves
        engine_turn = 0 if g.opponent == OPPONENT_USI_BLACK else 1
        assert (g.moves["eval"][engine_turn::2] == 0).all()
    assert "vs USI engine 4 games" in stats.summary()


def test_fraction_and_colour(evaluator, tmp_path):
    stats = run_selfplay(config(tmp_path, usi_fraction=0.5, usi_colour="white"), evaluator)
    (path,) = tmp_path.glob("*.hcpe3")
    games = replay(path, 30)
    assert sorted(g.opponent for g in games) == [OPPONENT_SELFPLAY] * 2 + [OPPONENT_USI_WHITE] * 2
    assert stats.usi_games == 2 and stats.games == 4


def test_engine_score_becomes_eval_and_data_format_skips_engine_positions(evaluator, tmp_path, scripted):
    out = tmp_path / "hcpe3"
    run_selfplay(config(out, games=2, max_moves=10, usi_engine=scripted("score")), evaluator)
    games = list(iter_hcpe3_games(next(out.glob("*.hcpe3"))))
    for g in games:
        engine_turn = 0 if g.opponent == OPPONENT_USI_BLACK else 1
        assert (g.moves["eval"][engine_turn::2] == 123).all()
    out = tmp_path / "data"
    cfg = config(out, games=2, max_moves=10, usi_engine=scripted("score"), format="data")
    stats = run_selfplay(cfg, evaluator)
    data = read_data(next(out.glob("*.data")))
    assert len(data) == stats.positions == 10  # 5 of the 10 plies of each game are ours
    board = cshogi.Board()
    for rec in data:
        board.set_hcp(rec["hcp"])
        assert abs(rec["policy"].sum() - 1) < 1e-5 and rec["result"] == 0


@pytest.mark.parametrize("reply", ["resign", "win", "illegal"])
def test_engine_resigns_declares_falsely_or_plays_illegal_and_loses(evaluator, tmp_path, scripted, reply):
    cfg = config(tmp_path, games=2, parallel=2, usi_engine=scripted(reply), usi_colour="white")
    stats = run_selfplay(cfg, evaluator)
    games = replay(next(tmp_path.glob("*.hcpe3")), 30, ended_by_engine=True)
    assert [len(g.moves) for g in games] == [1, 1]  # our first move; the engine's reply is no move
    assert stats.usi_wins == 2


def test_reply_outcomes():
    board = cshogi.Board()
    move, result = engine_reply_outcome(board, "7g7f")
    assert move == board.move_from_usi("7g7f") and result is None
    assert engine_reply_outcome(board, "resign") == (None, 2)
    assert engine_reply_outcome(board, "win") == (None, 2)  # false declaration
    assert engine_reply_outcome(board, "7g7e") == (None, 2)
    assert engine_reply_outcome(board, "junk") == (None, 2)
    nyugyoku = cshogi.Board("8K/RBGG5/PPPPPPPPP/9/9/9/9/9/4k4 b 2G4S4N4L 1")
    assert nyugyoku.is_nyugyoku()
    assert engine_reply_outcome(nyugyoku, "win") == (None, 1 | NYUGYOKU)


def test_scores_options_and_colours():
    assert usi_score_to_value("cp 0") == 0.5
    assert value_to_eval(usi_score_to_value("cp -456")) == -456
    assert usi_score_to_value("mate 3") == 1.0 and usi_score_to_value("mate -2") == 0.0
    assert usi_score_to_value(None) == usi_score_to_value("cp x") == 0.5
    assert parse_usi_options(["LimitDepth=4", "Path=a=b"]) == {"LimitDepth": "4", "Path": "a=b"}
    for bad in ("LimitDepth", "=4", "Limit Depth=4"):
        with pytest.raises(UserError, match="NAME=VALUE"):
            parse_usi_options([bad])
    cfg = SelfPlayConfig(usi_engine="x", usi_nodes=1, usi_fraction=0.25)
    colours = [engine_colour(i, cfg) for i in range(8)]
    assert colours == [None, None, None, cshogi.BLACK, None, None, None, cshogi.WHITE]
    assert [engine_colour(i, SelfPlayConfig()) for i in range(3)] == [None] * 3


@pytest.mark.parametrize("failure", ["crash", "hang"])
def test_engine_crash_or_timeout_drops_the_game_and_restarts(evaluator, tmp_path, scripted, capfd, failure):
    cfg = config(tmp_path, usi_engine=scripted(failure), usi_engines=1, usi_timeout=1.0, max_moves=16)
    stats = run_selfplay(cfg, evaluator)
    assert stats.dropped == 1 and stats.games == 3
    games = replay(next(tmp_path.glob("*.hcpe3")), 16)
    assert len(games) == 3
    err = capfd.readouterr().err
    assert "dropped" in err and ("exited" in err if failure == "crash" else "no answer" in err)


def _selfplay(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "bin" / "selfplay"), "--backend", "torch", "--no-progress", *args]


def test_cli_errors_are_one_line(tmp_path):
    cases = [
        (["--usi-engine", str(tmp_path / "missing"), "--usi-nodes", "1"], "cannot start"),
        (["--usi-engine", f"{sys.executable} -c pass", "--usi-nodes", "1"], "failed to start"),
        (["--usi-engine", GREEDY, "--usi-nodes", "1", "--usi-option", "Seed"], "NAME=VALUE"),
        (["--usi-engine", GREEDY], "--usi-byoyomi MS or --usi-nodes N"),
        (["--usi-nodes", "5"], "need --usi-engine"),
    ]
    for args, message in cases:
        out = tmp_path / "out"
        proc = subprocess.run(
            _selfplay("--out", str(out), "--games", "1", *args), capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("selfplay: error: ") and message in lines[0], lines
        assert not list(out.glob("*.hcpe3"))  # nothing written


def test_sigint_leaves_only_whole_games(tmp_path):
    model = tmp_path / "tiny.pt"
    save_checkpoint(model, build(preset("tiny"), seed=0))
    out = tmp_path / "out"
    cmd = _selfplay(
        "--model", str(model), "--out", str(out), "--games", "100000", "--parallel", "4", "--sims", "4",
        "--considered", "4", "--max-moves", "16", "--threads", "1", "--usi-engine", GREEDY,
        "--usi-nodes", "1", "--usi-fraction", "0.5", "--usi-engines", "2",
    )  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not any(f.stat().st_size for f in out.glob("*.hcpe3")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "interrupted" in stdout and "Traceback" not in stderr
    (path,) = out.glob("*.hcpe3")
    games = replay(path, 16)
    assert games and f"{sum(len(g.moves) for g in games)} positions" in stdout
    assert {g.opponent for g in games} <= {0, 1, 2}
    wins = np.array([g.result & RESULT_MASK for g in games])
    assert ((wins >= 0) & (wins <= 2)).all()


def test_loop_passes_the_usi_flags_to_selfplay(tmp_path):
    from train.loop.config import LoopConfig, selfplay_config

    cfg = LoopConfig(
        dir=str(tmp_path / "run"),
        usi_engine=GREEDY,
        usi_option="Seed=3, Book=a b",
        usi_nodes=5,
        usi_fraction=0.5,
    )
    cfg.validate()
    sp = selfplay_config(cfg, 1, tmp_path / "sp", tmp_path / "model.onnx")
    assert (sp.usi_engine, sp.usi_options) == (GREEDY, {"Seed": "3", "Book": "a b"})
    assert (sp.usi_nodes, sp.usi_byoyomi, sp.usi_fraction, sp.usi_engines) == (5, None, 0.5, 1)
    assert selfplay_config(LoopConfig(), 1, tmp_path, tmp_path).usi_engine is None
    with pytest.raises(UserError, match="--usi-byoyomi MS or --usi-nodes N"):
        LoopConfig(dir=str(tmp_path / "run"), usi_engine=GREEDY).validate()
    loop = [sys.executable, str(REPO / "bin" / "loop"), "--dir", str(tmp_path / "run")]
    proc = subprocess.run(
        [*loop, "--usi-engine", GREEDY, "--usi-byoyomi", "10", "--usi-option", "Seed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("loop: error: --usi-option 'Seed'"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
