"""`bin/analyze`'s run: every position of every game searched by one engine process, then per game a
commented KIF, an evaluation graph (PNG) and the figures (JSON) in the output folder, and for several
games a summary (summary.md).

A game whose three outputs exist is skipped, so a rerun continues where the last one stopped. The JSON
is written last: it marks a game as done. Ctrl-C (or an engine failure) keeps the finished games and
saves the positions of the game in progress as NAME.partial.json, from which a rerun with the same
settings goes on; a rerun with other settings starts that game again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import cshogi
from tqdm import tqdm

from engine.analysis.engine import AnalysisEngine, Candidate, Thought, engine_spec, ruled
from engine.analysis.judge import judge_game
from engine.analysis.kif import kif_text
from engine.analysis.plot import plot_game
from engine.analysis.records import Game
from engine.analysis.settings import Settings
from engine.analysis.summary import summary_markdown
from engine.console import say
from engine.errors import UserError
from engine.fileio import atomic_write_bytes, atomic_write_text, check_output_dir
from engine.usi_client import DEFAULT_MOVE_TIMEOUT, EngineFailure


@dataclass
class Outputs:
    """One game's files in the output folder."""

    kif: Path
    png: Path
    json: Path
    partial: Path

    @classmethod
    def of(cls, out: Path, name: str) -> Outputs:
        return cls(*(out / f"{name}{suffix}" for suffix in (".kif", ".png", ".json", ".partial.json")))

    def done(self) -> bool:
        return self.kif.is_file() and self.png.is_file() and self.json.is_file()


def analyse_games(games: list[Game], settings: Settings, out_dir: Path, progress: bool = True) -> list[dict]:
    """Analyse the games not yet done in `out_dir`; the figures of all of them, in order."""
    out = check_output_dir(out_dir, "--out")
    outputs = {g.name: Outputs.of(out, g.name) for g in games}
    figures: dict[str, dict] = {}
    for g in games:
        if outputs[g.name].done() and (done := _read_json(outputs[g.name].json)) is not None:
            figures[g.name] = done
    todo = [g for g in games if g.name not in figures]
    if len(todo) < len(games):
        say(f"analyze: {len(games) - len(todo)} of {len(games)} games already analysed in {out}: skipped")
    if todo:
        _run(todo, settings, outputs, figures, progress)
    if len(games) > 1:
        text = summary_markdown([figures[g.name] for g in games])
        atomic_write_text(out / "summary.md", text)
    return [figures[g.name] for g in games]


def _run(
    games: list[Game], settings: Settings, outputs: dict[str, Outputs], figures: dict, progress: bool
) -> None:
    spec = engine_spec(settings.model, settings.multipv, settings.options)
    engine = AnalysisEngine(spec, DEFAULT_MOVE_TIMEOUT)
    engine.connect()  # UserError if it does not start (a model that does not load, a bad option)
    try:
        resumed = {g.name: _read_partial(outputs[g.name].partial, g, settings) for g in games}
        total = sum(g.positions - len(resumed[g.name]) for g in games)
        with tqdm(total=total, unit="pos", disable=not progress, dynamic_ncols=True) as bar:
            for g in games:
                bar.set_description(g.name)
                figures[g.name] = analyse_game(engine, g, settings, outputs[g.name], resumed[g.name], bar)
    except EngineFailure as e:
        raise UserError(f"{e} (finished games are kept; a rerun goes on)") from None
    finally:
        engine.close()


def analyse_game(
    engine: AnalysisEngine, game: Game, settings: Settings, out: Outputs, thoughts: list[Thought], bar: tqdm
) -> dict:
    """One game's positions (after those of a resumed partial run), then its three files."""
    usi = [cshogi.move_to_usi(m) for m in game.moves]
    board = cshogi.Board(game.sfen)
    for move in game.moves[: len(thoughts)]:
        board.push(move)
    engine.usinewgame()
    wait = DEFAULT_MOVE_TIMEOUT + (settings.byoyomi or 0) / 1000 + (settings.nodes or 0) / 100  # >= 100 nps
    try:
        for ply in range(len(thoughts), game.positions):
            thoughts.append(ruled(board) or engine.think(game.sfen, usi[:ply], settings.go, wait))
            bar.update(1)
            if ply < len(game.moves):
                board.push(game.moves[ply])
    except BaseException:  # Ctrl-C, an engine failure: keep what this game has so far
        if thoughts:
            _write_partial(out.partial, game, settings, thoughts)
            say(f"analyze: {game.name}: {len(thoughts)} of {game.positions} positions kept in {out.partial}")
        raise
    figures = judge_game(game, thoughts, settings.thresholds, settings.record())
    atomic_write_bytes(out.kif, kif_text(figures).encode("cp932", "replace"))
    plot_game(figures, out.png)
    atomic_write_text(out.json, json.dumps(figures, ensure_ascii=False, indent=1) + "\n")
    out.partial.unlink(missing_ok=True)
    return figures


def _identity(game: Game, settings: Settings) -> dict:
    return {"start": game.sfen, "moves": [cshogi.move_to_usi(m) for m in game.moves], **settings.record()}


def _write_partial(path: Path, game: Game, settings: Settings, thoughts: list[Thought]) -> None:
    data = {"game": _identity(game, settings), "thoughts": [asdict(t) for t in thoughts]}
    atomic_write_text(path, json.dumps(data, ensure_ascii=False) + "\n")


def _read_partial(path: Path, game: Game, settings: Settings) -> list[Thought]:
    """The positions a stopped run analysed with these settings (none if the file is another game's,
    has other settings or cannot be read)."""
    data = _read_json(path)
    if data is None or data.get("game") != _identity(game, settings):
        return []
    try:
        thoughts = [
            Thought(t["bestmove"], [Candidate(**c) for c in t["candidates"]], t["nodes"])
            for t in data["thoughts"]
        ]
    except (KeyError, TypeError):
        return []
    return thoughts[: game.positions]


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
