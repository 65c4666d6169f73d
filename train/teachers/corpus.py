"""A supervised corpus from games between USI engines (e.g. Fairy-Stockfish, gpsshogi) at set strengths.

`parallel` games run at once, each in a worker thread that owns its two engine processes and plays
with `engine.match.arbiter.play_game` (the arbiter's rules, crash/timeout detection, engine restart). Game i
starts from opening i of `engine.match.openings.random_openings(seed)` (distinct random plies) or, with a
`book`, of `book_openings(book, seed)` (distinct lines of an opening book, so the games reach the
middlegames of normal shogi); the opening moves are not recorded. Teacher `i % 2` plays Black, so both
teachers play both colours. Every move after the opening
becomes a row: the position, the move played, the mover's `info score` as eval (dlshogi's scale, so
training's val_lambda can mix score and result) and the game result. A position already in the
corpus (any earlier game, any earlier run) is dropped; in hcpe3 a game is cut into runs of new
positions, each its own record starting at its first position, with the move as a one-hot target.

Only the main thread writes: a finished game is appended whole to each output, then logged in
games.jsonl. A rerun of the same command reads the log (games done) and the outputs (positions seen)
and plays on until `games` games are kept. SIGINT/SIGTERM abandon the games in flight (engines are
told `stop`) and end with whole records only. A game whose engine crashed, timed out or made an
illegal move or declaration is dropped (logged, not retried) and a later opening takes its place.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cshogi
import numpy as np
from tqdm import tqdm

from engine.core.rules import BLACK_WIN, DRAW, RESULT_MASK, WHITE_WIN
from engine.core.score import value_to_eval
from engine.errors import UserError
from engine.fileio import atomic_write_text, check_output_dir, check_settings_file
from engine.match.arbiter import Game, play_game
from engine.match.openings import Opening, book_openings, random_openings
from engine.records.formats import HCPE
from engine.records.writers import Hcpe3Writer, append_hcpe
from engine.selfplay.processes import stop_on_signals
from engine.selfplay.writer import GameRecord, to_hcpe3
from engine.usi_client import EngineSpec, UsiProcess, usi_score_to_value
from train.data.convert import REASON_NAMES
from train.data.detect import CORPUS_SETTINGS as SETTINGS
from train.data.readers import iter_hcpe3_positions, read_hcpe
from train.teachers.corpus_config import CorpusConfig

LOG = "games.jsonl"
DROPPED = ("crash", "timeout", "illegal move", "illegal declaration")  # no result to learn from
MAX_DROPPED_IN_ROW = 10  # then the engines are broken, not unlucky: stop instead of looping
WINNER_CODE = {cshogi.BLACK: BLACK_WIN, cshogi.WHITE: WHITE_WIN, None: DRAW}


@dataclass
class CorpusStats:
    games: int = 0  # kept, this run
    positions: int = 0  # written, this run
    duplicates: int = 0  # positions dropped as already in the corpus
    dropped: int = 0  # games dropped (crash, timeout, illegal)
    total_games: int = 0  # kept, in the corpus
    seconds: float = 0.0
    interrupted: bool = False
    reasons: dict[str, int] = field(default_factory=dict)

    def per_hour(self, count: int) -> float:
        return count * 3600 / max(self.seconds, 1e-9)

    def summary(self) -> str:
        return (
            f"{self.games} games ({self.total_games} in the corpus), {self.positions} new positions, "
            f"{self.duplicates} duplicates and {self.dropped} dropped games in {self.seconds:.0f}s: "
            f"{self.per_hour(self.games):.0f} games/h, {self.per_hour(self.positions):.0f} positions/h"
            + (" (interrupted)" if self.interrupted else "")
        )


class Stopped(Exception):
    """The run is stopping: the game in flight is abandoned."""


class TeacherProcess(UsiProcess):
    """A USI engine that stops being asked for moves once the run stops."""

    def __init__(self, engine: EngineSpec, timeout: float, stop: threading.Event) -> None:
        super().__init__(engine, timeout)
        self.stop = stop

    def go(self, **limits: Any) -> tuple[str, str | None]:
        if self.stop.is_set():
            raise Stopped
        return super().go(**limits)

    def interrupt(self) -> None:
        """Ask for the best move now (USI `stop`), so a stopping run does not wait for a long search."""
        with contextlib.suppress(Exception):  # the engine may be gone or restarting: nothing to stop then
            self._send("stop")


# ----- rows -----


def game_result(game: Game) -> int:
    """The hcpe3 result byte of a finished game: winner code plus reason bits."""
    return WINNER_CODE[game.winner] | REASON_NAMES.get(game.reason, 0)


def game_record(game: Game) -> GameRecord:
    """Every move after the opening as (position, move, mover's score as a win probability)."""
    board = game.opening.board()
    start = np.empty(32, np.uint8)
    board.to_hcp(start)
    record = GameRecord(start, game_result(game))
    for usi, score in zip(game.moves, game.scores, strict=False):  # an illegal last move has no score
        hcp = np.empty(32, np.uint8)
        board.to_hcp(hcp)
        move = board.move_from_usi(usi)
        move16 = cshogi.move16(move)
        record.add(hcp, move16, usi_score_to_value(score), np.array([move16], np.uint16), policy=np.ones(1))
        board.push(move)
    return record


def new_runs(record: GameRecord, seen: set[bytes]) -> list[GameRecord]:
    """The record's positions not in `seen` (which learns them), as runs of consecutive moves: each run
    a record of its own that starts at its first position, so hcpe3 replays exactly the new ones."""
    runs: list[GameRecord] = []
    current: GameRecord | None = None
    for i, hcp in enumerate(record.hcps):
        key = hcp.tobytes()
        if key in seen:
            current = None
            continue
        seen.add(key)
        if current is None:
            current = GameRecord(hcp, record.result, record.opponent)
            runs.append(current)
        current.add(hcp, record.move16s[i], record.values[i], record.candidates[i], policy=record.policies[i])
    return runs


def hcpe_rows(runs: Sequence[GameRecord]) -> np.ndarray:
    """hcpe records: position, the move played, the mover's eval, the winner (no reason bits)."""
    rows = np.zeros(sum(len(r) for r in runs), HCPE)
    k = 0
    for run in runs:
        n = len(run)
        rows["hcp"][k : k + n] = run.hcps
        rows["bestMove16"][k : k + n] = run.move16s
        rows["eval"][k : k + n] = [value_to_eval(v) for v in run.values]
        rows["gameResult"][k : k + n] = run.result & RESULT_MASK
        k += n
    return rows


# ----- the corpus on disk -----


class Corpus:
    """The output folder: corpus.hcpe / corpus.hcpe3, games.jsonl (one line per finished game) and
    corpus.json (the settings a rerun must repeat)."""

    def __init__(self, config: CorpusConfig) -> None:
        self.dir = check_output_dir(config.out_dir)
        self.formats = config.formats
        self._check_settings(config.settings())
        self.done, self.kept = self._read_log()
        # the hcpe3 writer cuts off a partial last game before the positions are read
        self._hcpe3 = Hcpe3Writer(self.path("hcpe3")) if "hcpe3" in self.formats else None
        self.seen = self._read_positions()

    def path(self, fmt: str) -> Path:
        return self.dir / f"corpus.{fmt}"

    def _check_settings(self, settings: dict[str, Any]) -> None:
        path = self.dir / SETTINGS
        check_settings_file(path, settings, "a corpus")
        if not path.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(settings, indent=1) + "\n")

    def _read_log(self) -> tuple[set[int], int]:
        """Indices of the games finished (kept or dropped) and how many were kept; a partial last line
        (a run killed mid-write) is cut off."""
        done: set[int] = set()
        kept = 0
        path = self.dir / LOG
        if path.exists():
            text = path.read_text()
            if not text.endswith("\n"):
                text = text[: text.rfind("\n") + 1]
                path.write_text(text)
            for line in text.splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    entry = json.loads(line)
                    done.add(int(entry["game"]))
                    kept += entry["reason"] not in DROPPED
        return done, kept

    def _read_positions(self) -> set[bytes]:
        seen: set[bytes] = set()
        if "hcpe" in self.formats and self.path("hcpe").exists() and self.path("hcpe").stat().st_size:
            hcps = np.asarray(read_hcpe(self.path("hcpe"))["hcp"])
            seen.update(bytes(h) for h in hcps)
        if "hcpe3" in self.formats and self.path("hcpe3").exists() and self.path("hcpe3").stat().st_size:
            seen.update(p.hcp.tobytes() for p in iter_hcpe3_positions(self.path("hcpe3")))
        return seen

    def add(self, index: int, game: Game, seconds: float, names: Sequence[str]) -> tuple[int, int]:
        """Append the game's new positions whole, then log it; (positions written, duplicates)."""
        written = dups = 0
        if game.reason not in DROPPED:
            record = game_record(game)
            runs = new_runs(record, self.seen)
            written = sum(len(r) for r in runs)
            dups = len(record) - written
            if self._hcpe3 is not None:
                for run in runs:
                    self._hcpe3.write(to_hcpe3(run))
            if "hcpe" in self.formats and written:
                append_hcpe(self.path("hcpe"), hcpe_rows(runs))
            self.kept += 1
        black, white = (names[0], names[1]) if game.black == 0 else (names[1], names[0])
        entry = {
            "game": index,
            "black": black,
            "white": white,
            "result": {cshogi.BLACK: "b", cshogi.WHITE: "w", None: "d"}[game.winner],
            "reason": game.reason,
            "plies": len(game.opening.moves) + len(game.moves),
            "positions": written,
            "duplicates": dups,
            "seconds": round(seconds, 2),
        }
        with open(self.dir / LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.done.add(index)
        return written, dups

    def close(self) -> None:
        if self._hcpe3 is not None:
            self._hcpe3.close()


# ----- the run -----


def _pending(done: set[int]) -> Iterator[int]:
    """Game indices not yet finished, lowest first, without end (dropped games need replacements)."""
    i = 0
    while True:
        if i not in done:
            yield i
        i += 1


class _Openings:
    """Opening i of a prefix-stable sequence (`make(count)`: the first `count`), grown on demand."""

    def __init__(self, make: Callable[[int], list[Opening]], expected: int, what: str) -> None:
        self.make, self.expected, self.what = make, expected, what
        self.openings: list[Opening] = []

    def __getitem__(self, i: int) -> Opening:
        if i >= len(self.openings):
            self.openings = self.make(max(2 * i + 16, self.expected))
            if len(self.openings) <= i:
                raise UserError(f"only {len(self.openings)} distinct openings {self.what}")
        return self.openings[i]


def corpus_openings(config: CorpusConfig) -> _Openings:
    """The games' openings: distinct random plies, or distinct lines of the book."""
    expected = config.games + config.games // 8 + 16
    if config.book is not None:
        book, plies = config.book, config.book_plies
        return _Openings(
            lambda n: book_openings(book, n, plies, config.seed), expected, f"of {plies} plies in {book}"
        )
    plies = config.random_plies
    return _Openings(lambda n: random_openings(n, plies, config.seed), expected, f"of {plies} random plies")


Work = tuple[int, Opening] | None
Done = tuple[str, Any]


def _worker(
    config: CorpusConfig,
    work: queue.Queue[Work],
    results: queue.Queue[Done],
    stop: threading.Event,
    engines: list[TeacherProcess],
) -> None:
    """Play the games handed out, each result to `results`; ("end", error or None) when finished."""
    error: BaseException | None = None
    own: list[TeacherProcess] = []
    try:
        for teacher in config.teachers:
            engine = TeacherProcess(teacher.engine, config.timeout, stop)
            own.append(engine)
            engines.append(engine)
            engine.connect()
        names = [e.name for e in own]
        limits = [t.limit for t in config.teachers]
        while (item := work.get()) is not None and not stop.is_set():
            index, opening = item
            start = time.monotonic()
            game = play_game(own, opening, index % 2, limits, config.max_moves)
            results.put(("game", (index, game, time.monotonic() - start, names)))
    except Stopped:
        pass
    except BaseException as e:  # noqa: BLE001 (handed to the main thread, which reports it)
        error = None if stop.is_set() else e
    finally:
        for engine in own:
            engine.close()
        results.put(("end", error))


def _show(bar: tqdm, stats: CorpusStats, corpus: Corpus, start: float) -> None:
    stats.seconds = time.monotonic() - start
    bar.set_postfix_str(
        f"{stats.per_hour(stats.games):.0f} games/h, pos {len(corpus.seen)} "
        f"(+{stats.per_hour(stats.positions):.0f}/h) dup {stats.duplicates} dropped {stats.dropped}",
        refresh=False,
    )


def run_corpus(config: CorpusConfig, stop: threading.Event | None = None) -> CorpusStats:
    """Play until the corpus holds `config.games` kept games (or `stop` is set, or SIGINT/SIGTERM)."""
    config.validate()
    stop = stop or threading.Event()
    openings = corpus_openings(config)
    openings[0]  # noqa: B018 (a bad book is a UserError before the output folder is made)
    corpus = Corpus(config)
    stats = CorpusStats(total_games=corpus.kept)
    pending = _pending(corpus.done)
    work: queue.Queue[Work] = queue.Queue()
    results: queue.Queue[Done] = queue.Queue()
    engines: list[TeacherProcess] = []
    in_flight = 0

    def hand_out() -> None:
        nonlocal in_flight
        while not stop.is_set() and in_flight < config.parallel and corpus.kept + in_flight < config.games:
            i = next(pending)
            work.put((i, openings[i]))
            in_flight += 1

    workers = min(config.parallel, max(config.games - corpus.kept, 0))
    start = time.monotonic()
    error: BaseException | None = None
    with (
        stop_on_signals(stop),
        tqdm(total=config.games, initial=corpus.kept, unit="game", disable=not config.progress) as bar,
    ):
        threads = [
            threading.Thread(target=_worker, args=(config, work, results, stop, engines), daemon=True)
            for _ in range(workers)
        ]
        for t in threads:
            t.start()
        hand_out()
        running, stopping, in_row = workers, False, 0
        try:
            while running:
                if stop.is_set():  # each worker ends after its game (at its None); make that game end now
                    if not stopping:
                        stopping = True
                        for _ in range(running):
                            work.put(None)
                    for e in list(engines):
                        e.interrupt()
                try:
                    kind, payload = results.get(timeout=0.5)
                except queue.Empty:
                    continue
                if kind == "end":
                    running -= 1
                    if payload is not None and error is None:
                        error = payload
                        stop.set()
                    continue
                in_flight -= 1
                if stop.is_set():
                    continue  # abandoned: its index is not logged, so a rerun plays it again
                _record(corpus, stats, *payload)
                in_row = in_row + 1 if payload[1].reason in DROPPED else 0
                if in_row >= MAX_DROPPED_IN_ROW and error is None:
                    reason = payload[1].reason
                    error = UserError(
                        f"{in_row} games in a row dropped (the last: {reason}); check the engines"
                    )
                    stop.set()
                bar.n = corpus.kept
                _show(bar, stats, corpus, start)
                bar.refresh()
                if corpus.kept >= config.games:
                    stop.set()
                hand_out()
        finally:
            stop.set()
            for _ in range(len(threads)):
                work.put(None)
            for t in threads:
                t.join(timeout=config.timeout + 10)
            corpus.close()
    stats.seconds = time.monotonic() - start
    stats.total_games = corpus.kept
    stats.interrupted = corpus.kept < config.games
    if error is not None:
        if isinstance(error, UserError):
            raise error
        raise RuntimeError(f"corpus worker failed: {error!r}") from error
    return stats


def _record(
    corpus: Corpus, stats: CorpusStats, index: int, game: Game, seconds: float, names: list[str]
) -> None:
    written, dups = corpus.add(index, game, seconds, names)
    stats.reasons[game.reason] = stats.reasons.get(game.reason, 0) + 1
    if game.reason in DROPPED:
        stats.dropped += 1
    else:
        stats.games += 1
        stats.positions += written
        stats.duplicates += dups
