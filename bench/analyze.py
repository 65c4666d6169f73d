#!/usr/bin/env python3
"""How fast bin/analyze goes: positions analysed per second at its default settings (or those given), over
committed match games, with every output written (KIF, PNG, JSON), the engine's start timed apart. The
baseline, from the same run: the time of the engine's searches alone (`go` to `bestmove`, its MultiPV
lines read), so what the analysis adds (judging, the KIF, the graph, the JSON) shows as the difference.

Usage: bench/analyze.py [RECORD ...] [--nodes N | --byoyomi MS] [--multipv K] [--model PATH]
                        [--usi-option NAME=VALUE]
(default: two games gpsshogi won against stage 9 at 1 s: models/matches/stage9-vs-gps1s/game-0012, -0019)"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm  # noqa: E402

from engine.analysis.engine import AnalysisEngine, Thought, engine_spec  # noqa: E402
from engine.analysis.records import read_games  # noqa: E402
from engine.analysis.run import Outputs, analyse_game  # noqa: E402
from engine.analysis.settings import DEFAULT_MULTIPV, Settings  # noqa: E402
from engine.paths import REPO_ROOT  # noqa: E402
from engine.usi_client import DEFAULT_MOVE_TIMEOUT, parse_usi_options  # noqa: E402


class TimedEngine(AnalysisEngine):
    """The analyst, adding up the seconds its searches take."""

    searching = 0.0

    def think(self, sfen: str, moves: list[str], go: str, wait: float) -> Thought:
        start = time.monotonic()
        try:
            return super().think(sfen, moves, go, wait)
        finally:
            self.searching += time.monotonic() - start


MATCH = REPO_ROOT / "models" / "matches" / "stage9-vs-gps1s"
GAMES = [MATCH / "game-0012.csa", MATCH / "game-0019.csa"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", default=[str(g) for g in GAMES])
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--byoyomi", type=int)
    ap.add_argument("--multipv", type=int, default=DEFAULT_MULTIPV)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--usi-option", action="append", default=[])
    args = ap.parse_args()
    settings = Settings(
        args.nodes, args.byoyomi, args.multipv, args.model, parse_usi_options(args.usi_option)
    )
    games = read_games(args.records)
    start = time.monotonic()
    spec = engine_spec(settings.model, settings.multipv, settings.options)
    engine = TimedEngine(spec, DEFAULT_MOVE_TIMEOUT)
    engine.connect()
    started = time.monotonic() - start
    positions = sum(g.positions for g in games)
    try:
        with tempfile.TemporaryDirectory() as out, tqdm(total=positions, unit="pos") as bar:
            start = time.monotonic()
            for game in games:
                analyse_game(engine, game, settings, Outputs.of(Path(out), game.name), [], bar)
            seconds = time.monotonic() - start
    finally:
        engine.close()
    model = settings.record()["model"]
    print(f"settings: {settings.limit} a position, MultiPV {settings.multipv}, model {model}")
    print(f"engine start (usi + isready): {started:.1f} s")
    print(
        f"{positions} positions of {len(games)} games in {seconds:.1f} s: "
        f"{positions / seconds:.2f} positions/s, {seconds / len(games):.1f} s a game"
    )
    searched = engine.searching
    print(
        f"baseline, the engine's searches alone: {searched:.1f} s, {positions / searched:.2f} positions/s "
        f"(the analysis adds {seconds - searched:.1f} s, {(seconds - searched) / seconds:.0%})"
    )


if __name__ == "__main__":
    main()
