"""Positions scored again by a USI engine: a stronger teacher's move and score for positions another
source chose (YaneuraOu users call it rescoring; with positions from the learner's own games it is
DAgger: the teacher labels the states the learner reaches, not only those the teacher reaches).

Each distinct position of the input hcpe/hcpe3 files, in input order or shuffled by a seed, is sent to
the engine (`position sfen`, then `go` with the given limit) and becomes an hcpe row: the position, the
engine's best move, its score as eval (dlshogi's scale, as bin/corpus writes it) and the input's game result,
so training's val_lambda still mixes score and result. A position the engine resigns or declares a
win in, or whose answer is not a legal move, is skipped and counted.

`parallel` engines run at once, one per worker thread; only the main thread writes. Rows are appended
whole in scoring order, then OUT.json (written atomically) records how many positions are done and how
many rows they gave. A rerun of the same command cuts OUT back to the rows OUT.json counts (a row
appended just before a kill is redone) and goes on. SIGINT/SIGTERM stop the searches in flight (their
positions are scored again by the rerun) and end with whole rows.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cshogi
import numpy as np
from tqdm import tqdm

from engine.core.rules import RESULT_MASK
from engine.core.score import value_to_eval
from engine.errors import UserError
from engine.fileio import atomic_write_text, check_output_file
from engine.records.formats import HCPE
from engine.records.writers import append_hcpe
from engine.selfplay.processes import stop_on_signals
from engine.usi_client import DEFAULT_MOVE_TIMEOUT, EngineFailure, EngineSpec, GoLimit, usi_score_to_value
from train.data.detect import detect_format
from train.data.readers import iter_hcpe3_positions, read_hcpe
from train.teachers.corpus import Stopped, TeacherProcess

FLUSH_ROWS = 64  # rows appended (and progress saved) at a time: at most this much work redone after a kill
MAX_FAILED_IN_ROW = 10  # engine crashes or timeouts in a row: the engine is broken, stop


def distinct_positions(paths: Sequence[Path], shuffle: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first occurrence of each position in the files: (hcps [N, 32] u1, results [N] u1), in input
    order, or permuted by seed `shuffle` (a part of the output then samples every game, not the first)."""
    seen: set[bytes] = set()
    hcps: list[np.ndarray] = []
    results: list[int] = []

    def add(hcp: np.ndarray, result: int) -> None:
        key = hcp.tobytes()
        if key not in seen:
            seen.add(key)
            hcps.append(hcp)
            results.append(result & RESULT_MASK)

    for path in paths:
        kind = detect_format(path)
        if kind == "hcpe":
            for row in read_hcpe(path):
                add(np.array(row["hcp"]), int(row["gameResult"]))
        elif kind == "hcpe3":
            for p in iter_hcpe3_positions(path):
                add(p.hcp, p.result)
        else:
            raise UserError(f"{path}: {kind} records hold no positions to rescore (give hcpe or hcpe3)")
    if not hcps:
        raise UserError(f"no positions in {', '.join(map(str, paths))}")
    order = np.arange(len(hcps)) if shuffle is None else np.random.default_rng(shuffle).permutation(len(hcps))
    return np.stack(hcps)[order], np.array(results, np.uint8)[order]


def score_row(hcp: np.ndarray, result: int, usi: str, score: str | None) -> np.ndarray | None:
    """The hcpe row of the engine's answer, or None when it is no legal move (resign, win, garbage)."""
    board = cshogi.Board()
    board.set_hcp(hcp)
    move = board.move_from_usi(usi) if usi not in ("resign", "win") else 0
    if not move or not board.is_legal(move):
        return None
    row = np.zeros(1, HCPE)
    row["hcp"] = hcp
    row["eval"] = value_to_eval(usi_score_to_value(score))
    row["bestMove16"] = cshogi.move16(move)
    row["gameResult"] = result
    return row


@dataclass
class RescoreConfig:
    inputs: Sequence[Path]
    out: Path
    engine: EngineSpec
    limit: GoLimit
    parallel: int = 1
    positions: int | None = None  # score at most the first N distinct positions
    shuffle: int | None = None  # seed of the order positions are scored in (None: input order)
    timeout: float = DEFAULT_MOVE_TIMEOUT
    progress: bool = True

    def settings(self) -> dict[str, Any]:
        """What a rerun must repeat to continue the same output."""
        return {
            "inputs": [str(Path(p).resolve()) for p in self.inputs],
            "engine": self.engine.command,
            "options": self.engine.options,
            "limit": self.limit.settings(),
            "shuffle": self.shuffle,
        }


@dataclass
class RescoreStats:
    done: int = 0  # input positions consumed (scored or skipped), this run and before
    rows: int = 0
    skipped: int = 0  # this run
    failed: int = 0  # this run: engine crash or timeout
    scored: int = 0  # this run
    seconds: float = 0.0
    interrupted: bool = False
    total: int = 0

    def summary(self) -> str:
        rate = self.scored / self.seconds if self.seconds else 0.0
        tail = f" (stopped at {self.done} of {self.total})" if self.interrupted else ""
        return (
            f"{self.rows} rows for {self.done} positions; this run {self.scored} scored, {self.skipped} "
            f"skipped, {self.failed} engine failures, {rate:.1f} positions/s{tail}"
        )


class Progress:
    """OUT and OUT.json: the rows written and the input positions they account for."""

    def __init__(self, config: RescoreConfig) -> None:
        self.out = check_output_file(config.out)
        self.meta = self.out.with_name(self.out.name + ".json")
        self.settings = config.settings()
        self.done = self.rows = 0
        if self.meta.exists():
            try:
                saved = json.loads(self.meta.read_text())
                self.done, self.rows = int(saved["done"]), int(saved["rows"])
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f"{self.meta}: not a rescore progress file ({e})") from None
            if saved.get("settings") != self.settings:
                raise UserError(
                    f"{self.out}: made with other inputs, engine or limit ({self.meta.name}); choose another"
                )
            size = self.out.stat().st_size if self.out.exists() else 0
            if size < self.rows * HCPE.itemsize:
                raise UserError(f"{self.out}: shorter than {self.meta} says ({self.rows} rows)")
            with open(self.out, "r+b") as f:  # drop rows appended after the last saved progress
                f.truncate(self.rows * HCPE.itemsize)
        elif self.out.exists() and self.out.stat().st_size:
            raise UserError(f"{self.out}: exists without {self.meta.name}; choose another output")

    def add(self, rows: list[np.ndarray], consumed: int) -> None:
        if rows:
            append_hcpe(self.out, np.concatenate(rows))
        self.done += consumed
        self.rows += len(rows)
        state = {"settings": self.settings, "done": self.done, "rows": self.rows}
        atomic_write_text(self.meta, json.dumps(state, indent=1) + "\n")


Answer = tuple[int, str | None, str | None]  # index, best move (None: the engine failed), score


def _worker(
    config: RescoreConfig,
    hcps: np.ndarray,
    work: queue.Queue[int | None],
    answers: queue.Queue[Answer | BaseException | None],
    stop: threading.Event,
    engines: list[TeacherProcess],
) -> None:
    """Score the positions handed out; a crashed or hung engine is restarted and the position failed."""
    engine = TeacherProcess(config.engine, config.timeout, stop)
    engines.append(engine)
    board = cshogi.Board()
    try:
        engine.connect()
        engine.usinewgame()
        while (i := work.get()) is not None and not stop.is_set():
            board.set_hcp(hcps[i])
            try:
                engine.position(sfen="sfen " + board.sfen())
                move, _ = engine.go(**config.limit.settings())
                answers.put((i, move, engine.last_score))
            except EngineFailure:
                answers.put((i, None, None))
                engine.restart()
                engine.usinewgame()
        answers.put(None)
    except Stopped:
        answers.put(None)
    except BaseException as e:  # noqa: BLE001 (handed to the main thread, which reports it)
        answers.put(None if stop.is_set() else e)
    finally:
        engine.close()


class _Ordered:
    """Answers put back in input order: each position's row (or why it has none) once all before it came."""

    def __init__(self, first: int) -> None:
        self.next = first
        self.ready: dict[int, tuple[np.ndarray | None, bool]] = {}

    def put(self, i: int, row: np.ndarray | None, failed: bool) -> None:
        self.ready[i] = (row, failed)

    def pop(self) -> list[tuple[np.ndarray | None, bool]]:
        out = []
        while self.next in self.ready:
            out.append(self.ready.pop(self.next))
            self.next += 1
        return out


def run_rescore(config: RescoreConfig, stop: threading.Event | None = None) -> RescoreStats:
    """Score the input positions not yet done (up to `positions`), appending rows to `config.out`."""
    if config.parallel < 1:
        raise UserError(f"--parallel must be at least 1, got {config.parallel}")
    config.limit.validate(0)
    stop = stop or threading.Event()
    progress = Progress(config)
    hcps, results = distinct_positions(config.inputs, config.shuffle)
    total = min(len(hcps), config.positions or len(hcps))
    stats = RescoreStats(done=progress.done, rows=progress.rows, total=total)
    work: queue.Queue[int | None] = queue.Queue()
    answers: queue.Queue[Answer | BaseException | None] = queue.Queue()
    engines: list[TeacherProcess] = []
    ordered = _Ordered(progress.done)
    rows: list[np.ndarray] = []
    n_workers = min(config.parallel, max(total - progress.done, 0))
    next_in, closed, failed_in_row = progress.done, False, 0
    error: BaseException | None = None

    def hand_out(k: int) -> None:
        """k more positions to the workers; once there are none (or the run stops), an end to each."""
        nonlocal next_in, closed
        for _ in range(k):
            if next_in < total and not stop.is_set():
                work.put(next_in)
                next_in += 1
        if (next_in >= total or stop.is_set()) and not closed:
            closed = True
            for _ in range(n_workers):
                work.put(None)
            for e in list(engines):  # a long search ends now instead of at its limit
                e.interrupt()

    threads = [
        threading.Thread(target=_worker, args=(config, hcps, work, answers, stop, engines), daemon=True)
        for _ in range(n_workers)
    ]
    start = time.monotonic()
    with (
        stop_on_signals(stop),
        tqdm(total=total, initial=progress.done, unit="pos", disable=not config.progress) as bar,
    ):
        for t in threads:
            t.start()
        hand_out(2 * n_workers)  # two each, so no engine waits for the main thread
        running = n_workers
        while running:
            try:
                answer = answers.get(timeout=0.5)
            except queue.Empty:
                hand_out(0)
                continue
            if answer is None or isinstance(answer, BaseException):
                running -= 1
                if answer is not None and error is None:
                    error = answer
                    stop.set()
                hand_out(0)
                continue
            if stop.is_set():
                continue  # maybe cut short by `stop`: not written, so a rerun scores it again
            i, move, score = answer
            failed_in_row = failed_in_row + 1 if move is None else 0
            if failed_in_row >= MAX_FAILED_IN_ROW and error is None:
                error = UserError(f"{config.engine.command}: {failed_in_row} crashes or timeouts in a row")
                stop.set()
            row = None if move is None else score_row(hcps[i], int(results[i]), move, score)
            ordered.put(i, row, move is None)
            hand_out(1)
            for row, failed in ordered.pop():
                if row is not None:
                    rows.append(row)
                    stats.scored += 1
                elif failed:
                    stats.failed += 1
                else:
                    stats.skipped += 1
            if ordered.next - progress.done >= FLUSH_ROWS:
                progress.add(rows, ordered.next - progress.done)
                rows = []
            stats.seconds = time.monotonic() - start
            bar.n = ordered.next
            bar.set_postfix_str(f"{stats.scored / max(stats.seconds, 1e-9) * 3600:,.0f} pos/h", refresh=False)
            bar.refresh()
        progress.add(rows, ordered.next - progress.done)
    for t in threads:
        t.join(timeout=config.timeout + 10)
    stats.seconds = time.monotonic() - start
    stats.done, stats.rows = progress.done, progress.rows
    stats.interrupted = progress.done < total
    if error is not None:
        if isinstance(error, UserError):
            raise error
        raise RuntimeError(f"rescore worker failed: {error!r}") from error
    return stats
