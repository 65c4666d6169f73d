"""The USI engine: the command loop and the thinking thread around PUCT / Gumbel / policy play.

The stdin reader (`UsiEngine.run`) never blocks on thinking: `go` starts a background thread and
stop / ponderhit / isready / quit are answered while it runs. Whatever goes wrong inside the thread
is reported as `info string error: ...` and still answered with a legal `bestmove`, so a GUI never
sees a crash or a time loss. Bad commands get an `info string error:` line and change nothing, with
two exceptions a GUI depends on: a `go` with a bad argument still searches with what it could parse
(`info string warning:` for the rest), and after a rejected `position` the next `go` answers
`bestmove resign` (the engine does not know the position, and the last one may be the other side's).

Mate searches (df-pn) run in a child process (engine/search/mate.py) with a wall-clock deadline, so `stop`,
`quit` and the move's time limit are kept while they run. `position` also takes a tsume problem's
position, where the attacker has no king: `go mate` solves it, a normal `go` says in one line that it
needs both kings and resigns (the network and the search's mate probes assume two kings).

A model that fails to load is reported at `isready` (`info string error: <path>: ...`) and the
engine still answers `readyok` (a GUI that gets no readyok hangs or kills the engine); every later
`go` repeats the error and plays a safe move (a found mate, else the first legal move) until a
working DNN_Model is set. Loading says what takes long as it goes (engine.play.preparing): a first
isready on a new machine exports, calibrates and compiles for many seconds, all cached on disk after.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import cshogi
import numpy as np

from engine.backends.evaluator import Evaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.core.position import board_after, parse_position, sides_without_king
from engine.core.score import value_to_eval
from engine.paths import REPO_ROOT
from engine.play import timeman
from engine.play.answers import info_lines, one_line, safe_move
from engine.play.book import BookSlot, OpeningBook, choose_book_move
from engine.play.deadlines import MateClock, TimedEvaluator
from engine.play.go import GoCommand, parse_go, time_budget
from engine.play.network import load_evaluators
from engine.play.options import ENGINE_AUTHOR, ENGINE_NAME, default_options, search_params
from engine.play.preparing import Progress, heartbeat, kernel_cache_dir
from engine.search.control import PuctResult, SearchControl
from engine.search.mate import MAX_DEPTH, MateResult, MateSearcher, mated_in_two
from engine.search.puct import Search, policy_move

_COLOR_NAMES = {cshogi.BLACK: "Black", cshogi.WHITE: "White"}

# ----- the engine -----


@dataclass
class _Thinking:
    thread: threading.Thread
    control: SearchControl
    go: GoCommand
    position: tuple[str, list[int]]  # as of the `go`: a later `position` must not change this search
    turn: int
    ply: int
    rejected: str | None = None  # the last `position` was rejected: we do not know the position
    released: threading.Event = field(default_factory=threading.Event)  # stop / ponderhit arrived
    answered: threading.Event = field(default_factory=threading.Event)  # bestmove is being sent


class UsiEngine:
    def __init__(self, out: Callable[[str], None] | None = None, engine_dir: Path | None = None) -> None:
        self._out = out or _stdout_writer()
        self._lock = threading.Lock()
        self.engine_dir = engine_dir or REPO_ROOT / "bin"
        self.options = {o.name: o for o in default_options()}
        self.values: dict[str, Any] = {o.name: o.default for o in self.options.values()}
        self.position: tuple[str, list[int]] = (cshogi.STARTING_SFEN, [])
        self.position_error: str | None = None  # why the last `position` was rejected
        self.mate = MateSearcher()
        self.books = BookSlot()
        self._mate_error: str | None = None  # shown once, not at every move
        self.evaluator: Evaluator | None = None
        self.spares: list[Evaluator] = []  # UCT_Threads beyond the first
        self._loaded_key: tuple | None = None
        self.load_error: str | None = None
        self.preparation: Progress | None = None  # the last load's steps and seconds (for --prepare)
        self.search: Search | None = None
        self.thinking: _Thinking | None = None
        self.rng = np.random.default_rng()
        self._gumbel_rate: float | None = None  # simulations/s of this engine's gumbel searches so far

    # ----- output -----

    def send(self, line: str) -> None:
        with self._lock:
            self._out(line)

    def info_string(self, msg: str) -> None:
        self.send(msg if msg.startswith("info ") else f"info string {msg}")

    def error(self, msg: str) -> None:
        self.send(f"info string error: {msg}")

    # ----- the command loop -----

    def run(self, stream: IO[str]) -> None:
        for line in stream:
            if not self.handle(line):
                return
        self.handle("quit")

    def handle(self, line: str) -> bool:
        """One command line; False after quit. Never raises."""
        try:
            tokens = line.split()
            if not tokens:
                return True
            cmd, args = tokens[0], tokens[1:]
            if cmd == "quit":
                self._stop(wait=True)
                self.mate.close()
                return False
            handler = self._handlers().get(cmd)
            if handler is not None:
                handler(args, line)
        except Exception as e:  # a bug must not kill the engine mid-game
            self.error(f"{type(e).__name__}: {e}")
        return True

    def _handlers(self) -> dict[str, Callable[[list[str], str], None]]:
        return {
            "usi": lambda a, l: self.cmd_usi(),
            "isready": lambda a, l: self.cmd_isready(),
            "setoption": lambda a, l: self.cmd_setoption(l),
            "usinewgame": lambda a, l: self.cmd_usinewgame(),
            "position": lambda a, l: self.cmd_position(a),
            "go": lambda a, l: self.cmd_go(a),
            "stop": lambda a, l: self._stop(wait=False),
            "ponderhit": lambda a, l: self.cmd_ponderhit(),
            "gameover": lambda a, l: self._stop(wait=True),
        }

    def cmd_usi(self) -> None:
        self.send(f"id name {ENGINE_NAME}")
        self.send(f"id author {ENGINE_AUTHOR}")
        for o in self.options.values():
            self.send(o.usi_line())
        self.send("usiok")

    def cmd_isready(self) -> None:
        self.mate.warm()
        t = self.thinking
        if t is not None and t.answered.is_set():
            t.thread.join()  # it sent bestmove and is ending: options set since then load now
        if t is None or not t.thread.is_alive():
            self.ensure_evaluator()
            if self.values["USI_OwnBook"]:
                with heartbeat(self.send) as progress:  # gpsshogi's book: seconds, at every start
                    progress.stage("reading the opening book", self.values["Book_File"])
                    self._book()
        self.send("readyok")

    def cmd_setoption(self, line: str) -> None:
        m = re.match(r"\s*setoption\s+name\s+(.+?)(?:\s+value\s+(.*?))?\s*$", line)
        if not m:
            self.error("setoption needs: setoption name <id> [value <x>]")
            return
        name, text = m.group(1), m.group(2)
        option = self.options.get(name) or next(
            (o for o in self.options.values() if o.name.lower() == name.lower()), None
        )
        if option is None:
            self.error(f"setoption: unknown option {name!r}")
            return
        try:
            self.values[option.name] = option.parse(text if text is not None else "")
        except ValueError as e:
            self.error(f"setoption: {e}")

    def cmd_usinewgame(self) -> None:
        self._stop(wait=True)
        if self.search is not None:
            self.search.clear()

    def cmd_position(self, args: list[str]) -> None:
        try:
            self.position = parse_position(args, both_kings=False)  # a tsume problem's too: go mate
        except ValueError as e:
            self.position_error = f"position: {e}"
            self.error(f"{self.position_error} (the next go resigns)")
        else:
            self.position_error = None

    def cmd_ponderhit(self) -> None:
        t = self.thinking
        if t is None or not t.go.ponder:
            return
        t.go.ponder = False
        self._set_deadlines(t.control, self._budget(t.go, t.turn, t.ply), time.monotonic())
        t.control.infinite = t.go.infinite
        t.released.set()

    def _stop(self, wait: bool) -> None:
        t = self.thinking
        if t is None:
            return
        t.control.stopped = True
        t.released.set()
        if wait:
            t.thread.join()
            self.thinking = None

    # ----- model -----

    def _option_path(self, name: str) -> Path | None:
        """A file option's path (relative: to the engine's folder); None when it is empty."""
        text = str(self.values[name]).strip()
        if not text:
            return None
        path = Path(text).expanduser()
        return path if path.is_absolute() else (self.engine_dir / path).resolve()

    def _book(self) -> OpeningBook | None:
        """The opening book Book_File names (loaded on first use); a load error is reported, no book."""
        try:
            return self.books.sync(self._option_path("Book_File"))
        except Exception as e:
            self.error(f"Book_File: {one_line(e)}; playing without a book")
            return None

    def ensure_evaluator(self) -> Evaluator | None:
        """(Re)load the network when an option it depends on changed, saying what takes long as it goes;
        errors become info strings."""
        names = ("Backend", "DNN_Batch_Size", "Threads", "DNN_Activation", "CPU_Int8", "UCT_Threads")
        key = (self._option_path("DNN_Model"), *(self.values[n] for n in names))
        if key == self._loaded_key:
            return self.evaluator
        for ev in self.spares:
            ev.close()
        if self.evaluator is not None:
            self.evaluator.close()
        self.evaluator, self.spares, self.search, self._loaded_key = None, [], None, key
        with heartbeat(self.send) as progress:
            self.preparation = progress
            try:
                timed, *spares = load_evaluators(key[0], self.values, self.info_string, progress.stage)
            except Exception as e:
                self.load_error = f"DNN_Model {key[0] or '(default)'}: {one_line(e)}"
                self.error(self.load_error)
                return None
            self.load_error = None
            self.evaluator, self.spares = timed, spares
            progress.stage("loading numba", "")  # its import, at every start: not one-time work
            from engine.search.puct_tree import FastSearch  # numba: compiled at isready, after usiok

            progress.stage("compiling search kernels", f"one-time, cached in {kernel_cache_dir()}")
            self.search = FastSearch(timed, search_params(self.values), batch_size=key[2], spares=spares)
        return timed

    # ----- go -----

    def _budget(self, go: GoCommand, turn: int, ply: int) -> timeman.Budget:
        return time_budget(go, turn, ply, self.values["Byoyomi_Margin"], self.values["Time_Margin"])

    def _set_deadlines(self, control: SearchControl, plan: timeman.Budget, now: float) -> None:
        """The plan as deadlines from `now`, each one network call early: the search looks at the clock
        only between calls, so a call begun just before a deadline must still end before it."""
        reserve = self.evaluator.call_s if isinstance(self.evaluator, TimedEvaluator) else 0.0
        control.target = now + max(plan.target_ms / 1000 - reserve, 0.0)
        control.hard = now + max(plan.hard_ms / 1000 - reserve, 0.0)
        control.saving = None if plan.saving_ms is None else now + plan.saving_ms / 1000

    def cmd_go(self, args: list[str]) -> None:
        go, warnings = parse_go(args)
        for w in warnings:
            self.send(f"info string warning: {w}")
        self._stop(wait=True)
        board = board_after(*self.position)
        control = SearchControl()
        if go.mate is None:
            if go.ponder or go.infinite:
                control.infinite = True
            elif go.nodes is None or go.clock(board.turn) is not None or go.movetime is not None:
                self._set_deadlines(control, self._budget(go, board.turn, board.move_number), control.start)
        playouts = go.nodes or self.values["Const_Playout"] or None
        control.max_playouts = playouts
        target = self._go_mate if go.mate is not None else self._think
        thread = threading.Thread(target=target, name="search", daemon=True)
        self.thinking = _Thinking(
            thread, control, go, self.position, board.turn, board.move_number, self.position_error
        )
        thread.start()

    def _wait_release(self, t: _Thinking) -> None:
        """USI: while pondering or in go infinite, bestmove waits for stop (or ponderhit)."""
        while (t.go.ponder or t.go.infinite) and not t.control.stopped:
            t.released.wait()
            t.released.clear()

    def _go_mate(self) -> None:
        """`go mate`: df-pn for the side to move (in check too: cshogi's df-pn then tries the evasions
        that give check), until mate is proven or disproven, the time is up, or `stop`."""
        t = self.thinking
        if t.rejected:
            self.error(f"{t.rejected}; no mate search")
            self.send("checkmate timeout")
            return
        if 1 - t.turn in sides_without_king(t.position[0]):
            self.info_string(f"go mate: {_COLOR_NAMES[1 - t.turn]} has no king to mate")
            self.send("checkmate nomate")
            return
        try:
            deadline = None if t.go.mate < 0 else t.control.start + t.go.mate / 1000
            depth = self.values["Mate_Root_Search"] or MAX_DEPTH
            result = self.mate.search(*t.position, depth, deadline, lambda: t.control.stopped)
        except Exception as e:
            self._report_exception(e)
            result = MateResult(None)
        self._report_mate_error(result)
        if result.pv:
            self.send("checkmate " + " ".join(cshogi.move_to_usi(m) for m in result.pv))
        else:
            self.send("checkmate nomate" if result.proven_none else "checkmate timeout")

    def _think(self) -> None:
        t = self.thinking
        board = board_after(*t.position)
        try:
            if t.rejected:
                self.error(f"{t.rejected}; resigning rather than playing a move for another position")
                answer = "bestmove resign"
            elif missing := sides_without_king(t.position[0]):
                self.error(
                    f"go: a normal go needs both kings, and {_COLOR_NAMES[missing[0]]} has none here "
                    "(a tsume problem: go mate solves it); resigning"
                )
                answer = "bestmove resign"
            else:
                answer = self._decide(t, board, *t.position)
        except Exception as e:
            self._report_exception(e)
            answer = safe_move(board)
        self._wait_release(t)
        t.answered.set()
        self.send(answer)

    def _report_exception(self, e: Exception) -> None:
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        loc = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
        self.error(f"search failed ({type(e).__name__}: {one_line(e)}{loc}); playing a safe move")

    def _decide(self, t: _Thinking, board: cshogi.Board, sfen: str, moves: list[int]) -> str:
        """The bestmove line for the root position."""
        if board.is_game_over():
            return "bestmove resign"
        if board.is_nyugyoku():
            return "bestmove win"
        book = self._book() if self.values["USI_OwnBook"] else None
        if book and board.move_number <= self.values["Book_Moves"] and (choices := book.moves(board)):
            move = choose_book_move(choices, self.values["Book_Best_Move"], self.rng)
            self.info_string(f"book {move} ({' '.join(f'{m}:{w}' for m, w in choices)})")
            return f"bestmove {move}"
        clock = MateClock(t.control)
        mate = self._root_mate(t, board, clock)
        if mate is not None:
            self._send_mate_line(mate, len(mate))
            return self._bestmove(mate[0], mate[1] if len(mate) > 1 else None)
        mated = self._mated_line(t, board, clock)
        if mated is not None:
            self._send_mate_line(mated, -len(mated))
            if self.values["Resign_Threshold"] > 0:
                return "bestmove resign"
            return self._bestmove(mated[0], mated[1] if len(mated) > 1 else None)
        ev = self.ensure_evaluator()
        if ev is None:
            self.error(f"{self.load_error}; playing the first legal move")
            return safe_move(board)
        if self.values["Search_Mode"] == "policy":
            return self._policy_play(ev, board)
        search = self.search
        search.params = search_params(self.values)
        search.set_position(sfen, moves, max_reuse_plies=4 if self.values["ReuseSubtree"] else -1)
        gumbel = search.params.mode == "gumbel"
        if gumbel and t.control.max_playouts is None:
            t.control.max_playouts = self._gumbel_budget(t.control)
        interval = self.values["PV_Interval"] / 1000
        result = search.run(t.control, on_info=self._send_info, info_interval=interval, rng=self.rng)
        if gumbel:  # its time from the `go` on: a rate on the safe side
            self._note_gumbel_rate(result.playouts, result.elapsed)
        self._send_info(result)
        self.info_string(f"cache hits {search.cache.hit_rate:.1%}, {len(search.cache)} positions")
        if result.bestmove is None:
            return "bestmove resign"
        if result.mate_plies is None and result.value < self.values["Resign_Threshold"] / 1000:
            return "bestmove resign"
        return self._bestmove(result.bestmove, result.ponder)

    def _gumbel_budget(self, control: SearchControl) -> int:
        """On a clock, the simulations this engine's measured rate fits before the target time (the
        hard deadline still stops a slow search); otherwise Gumbel_Simulations."""
        base = self.values["Gumbel_Simulations"]
        if control.target is None or control.infinite:
            return base
        low, high = self.values["Gumbel_Considered"], self.options["Gumbel_Simulations"].max
        return timeman.simulations_for(self._gumbel_rate, control.target - time.monotonic(), base, low, high)

    def _note_gumbel_rate(self, simulations: int, seconds: float) -> None:
        """Fold a finished gumbel search's speed into the rate the next budget is planned with."""
        if simulations < 16:
            return  # a forced move, a stopped search
        rate = simulations / max(seconds, 0.02)  # too fast to time: at least this fast
        self._gumbel_rate = rate if self._gumbel_rate is None else 0.5 * (self._gumbel_rate + rate)

    def _root_mate(self, t: _Thinking, board: cshogi.Board, clock: MateClock) -> list[int] | None:
        """Our mating line, if the 1-ply probe or df-pn (within the mate clock's share) finds one."""
        depth = self.values["Mate_Root_Search"]
        if depth <= 0:
            return None
        m1 = 0 if board.is_check() else board.mate_move_in_1ply()
        if m1:
            return [m1]
        result = self.mate.search(
            *t.position, depth, clock.deadline(), clock.stopped, max_nodes=self.values["Mate_Root_Nodes"]
        )
        self._report_mate_error(result)
        return result.pv

    def _mated_line(self, t: _Thinking, board: cshogi.Board, clock: MateClock) -> list[int] | None:
        """The longest known line in which we are mated: every move allows a mate in one, or (in check)
        df-pn proves every evasion mated. None when no such proof was found."""
        depth = self.values["Mate_Root_Search"]
        if depth <= 0:
            return None
        line = mated_in_two(board)
        if line is None and board.is_check():
            result = self.mate.search(
                *t.position, depth, clock.deadline(), clock.stopped,
                max_nodes=self.values["Mate_Root_Nodes"], defender=True,
            )  # fmt: skip
            self._report_mate_error(result)
            line = result.pv
        return line

    def _report_mate_error(self, result: MateResult) -> None:
        if result.error and result.error != self._mate_error:
            self.error(f"{result.error}; searching without mate proofs")
        self._mate_error = result.error or self._mate_error

    def _send_mate_line(self, line: list[int], plies: int) -> None:
        """`score mate N` (N < 0: we are mated) with the line that proves it."""
        moves = " ".join(map(cshogi.move_to_usi, line))
        head = "info multipv 1" if self.values["MultiPV"] > 1 else "info"
        self.send(f"{head} depth {len(line)} score mate {plies} pv {moves}")

    def _policy_play(self, ev: Evaluator, board: cshogi.Board) -> str:
        moves, labels = legal_moves_and_labels(board)
        fill_features(board, ev.x1[0], ev.x2[0])
        policy, value = ev.evaluate(1)
        logits = policy[0][labels]
        idx = policy_move(logits, self.values["Policy_Temperature"] / 100, self.rng)
        v = float(value[0])
        self.send(
            f"info depth 1 nodes 1 score cp {value_to_eval(v)} pv {cshogi.move_to_usi(int(moves[idx]))}"
        )
        if v < self.values["Resign_Threshold"] / 1000:
            return "bestmove resign"
        return self._bestmove(int(moves[idx]), None)

    def _bestmove(self, move: int, ponder: int | None) -> str:
        line = f"bestmove {cshogi.move_to_usi(move)}"
        if ponder and self.values["USI_Ponder"]:
            line += f" ponder {cshogi.move_to_usi(ponder)}"
        return line

    def _send_info(self, r: PuctResult) -> None:
        for line in info_lines(self.search, r, self.values["UCT_NodeLimit"], self.values["MultiPV"]):
            self.send(line)


def _stdout_writer() -> Callable[[str], None]:
    def write(line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):  # the GUI is gone
            raise SystemExit(0) from None

    return write
