"""The USI engine: protocol, options, and the thinking thread around PUCT / Gumbel / policy play.

The stdin reader (`UsiEngine.run`) never blocks on thinking: `go` starts a background thread and
stop / ponderhit / isready / quit are answered while it runs. Whatever goes wrong inside the thread
is reported as `info string error: ...` and still answered with a legal `bestmove`, so a GUI never
sees a crash or a time loss. Bad commands get an `info string error:` line and change nothing.

A model that fails to load is reported at `isready` (`info string error: <path>: ...`) and the
engine still answers `readyok` (a GUI that gets no readyok hangs or kills the engine); every later
`go` repeats the error and plays a safe move (a found mate, else the first legal move) until a
working DNN_Model is set.
"""

from __future__ import annotations

import inspect
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

from engine import timeman
from engine.backends import BACKENDS, create_evaluator, default_model_path
from engine.evaluator import Evaluator
from engine.features import fill_features
from engine.mate import MAX_DEPTH, MateResult, dfpn, mate_search
from engine.moves import legal_moves_and_labels
from engine.network import value_to_eval
from engine.position import parse_position
from engine.puct import SEARCH_MODES, Search, SearchControl, SearchParams, SearchResult, policy_move

ENGINE_NAME = "GumbelShogi"
ENGINE_AUTHOR = "gumbel-shogi developers"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GO_MS = 1000  # a bare `go` (no clock, no limit) thinks this long
MATE_SCORE_CP = 32000


# ----- options -----


@dataclass(frozen=True)
class Option:
    """One USI option: `type` is spin, check, combo, string or filename."""

    name: str
    type: str
    default: Any
    min: int = 0
    max: int = 0
    choices: tuple[str, ...] = ()

    def usi_line(self) -> str:
        line = f"option name {self.name} type {self.type} default {self.format(self.default)}"
        if self.type == "spin":
            line += f" min {self.min} max {self.max}"
        for c in self.choices:
            line += f" var {c}"
        return line

    @staticmethod
    def format(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "<empty>" if value == "" else str(value)

    def parse(self, text: str) -> Any:
        """The value of `setoption ... value <text>`; ValueError with a message if it is not valid."""
        if self.type == "spin":
            try:
                v = int(text)
            except ValueError:
                raise ValueError(f"{self.name} needs an integer, got {text!r}") from None
            if not self.min <= v <= self.max:
                raise ValueError(f"{self.name} must be in {self.min}..{self.max}, got {v}")
            return v
        if self.type == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{self.name} needs true or false, got {text!r}")
            return text.lower() == "true"
        if self.type == "combo":
            if text not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}, got {text!r}")
            return text
        return "" if text == "<empty>" else text


def default_options() -> list[Option]:
    model = default_model_path()
    big = 2**31 - 1
    return [
        Option("USI_Ponder", "check", False),
        Option("USI_Hash", "spin", 256, 1, 1 << 20),  # GUIs send it; the tree is bounded by UCT_NodeLimit
        Option("DNN_Model", "filename", str(model) if model else ""),
        Option("Backend", "combo", "auto", choices=BACKENDS),
        Option("Threads", "spin", 0, 0, 256),  # CPU inference threads (0: the runtime's default)
        Option("DNN_Batch_Size", "spin", 32, 1, 1024),
        Option("Search_Mode", "combo", "puct", choices=SEARCH_MODES),
        Option("Gumbel_Simulations", "spin", 64, 2, 100000),
        Option("Gumbel_Considered", "spin", 16, 2, 64),
        Option("Policy_Temperature", "spin", 0, 0, 1000),  # percent; 0 = greedy
        Option("C_init", "spin", 144, 0, 500),
        Option("C_base", "spin", 28288, 10000, 100000),
        Option("C_fpu_reduction", "spin", 27, 0, 100),
        Option("C_init_root", "spin", 116, 0, 500),
        Option("C_base_root", "spin", 25617, 10000, 100000),
        Option("C_fpu_reduction_root", "spin", 0, 0, 100),
        Option("Softmax_Temperature", "spin", 174, 1, 500),  # percent
        Option("Resign_Threshold", "spin", 0, 0, 1000),  # permille; 0 never resigns (dlshogi default)
        Option("Draw_Value_Black", "spin", 500, 0, 1000),  # permille
        Option("Draw_Value_White", "spin", 500, 0, 1000),
        Option("Draw_Ply", "spin", 0, 0, 10000),  # 0: no move limit in the search
        Option("Byoyomi_Margin", "spin", 200, 0, big),
        Option("Time_Margin", "spin", 1000, 0, big),
        Option("PV_Interval", "spin", 500, 0, big),
        Option("Mate_Root_Search", "spin", 33, 0, MAX_DEPTH),  # df-pn depth at the root; 0 = off
        Option("Mate_Root_Nodes", "spin", 100000, 1000, big),
        Option("Const_Playout", "spin", 0, 0, big),
        Option("UCT_NodeLimit", "spin", 2_000_000, 1000, big),
        Option("ReuseSubtree", "check", True),
    ]


# ----- go parsing (positions are parsed and validated in engine/position.py) -----


_GO_INT = ("btime", "wtime", "binc", "winc", "byoyomi", "nodes", "movetime")


@dataclass
class GoCommand:
    btime: int | None = None
    wtime: int | None = None
    binc: int = 0
    winc: int = 0
    byoyomi: int = 0
    nodes: int | None = None
    movetime: int | None = None
    infinite: bool = False
    ponder: bool = False
    mate: int | None = None  # go mate: ms, or -1 for infinite

    def clock(self, turn: int) -> timeman.Clock | None:
        remaining = self.btime if turn == cshogi.BLACK else self.wtime
        if remaining is None and not self.byoyomi:
            return None
        inc = self.binc if turn == cshogi.BLACK else self.winc
        return timeman.Clock(remaining=remaining or 0, increment=inc, byoyomi=self.byoyomi)


def parse_go(args: list[str]) -> GoCommand:
    go = GoCommand()
    i = 0
    while i < len(args):
        key = args[i]
        if key in ("infinite", "ponder"):
            setattr(go, key, True)
            i += 1
        elif key == "mate":
            value = args[i + 1] if i + 1 < len(args) else "infinite"
            if value == "infinite":
                go.mate = -1
            elif value.isdigit():
                go.mate = int(value)
            else:
                raise ValueError(f"go mate needs milliseconds or infinite, got {value!r}")
            i += 2
        elif key in _GO_INT:
            if i + 1 >= len(args) or not args[i + 1].lstrip("-").isdigit():
                raise ValueError(f"go {key} needs an integer")
            setattr(go, key, int(args[i + 1]))
            i += 2
        else:
            raise ValueError(f"unknown go parameter {key!r}")
    return go


# ----- the engine -----


@dataclass
class _Thinking:
    thread: threading.Thread
    control: SearchControl
    go: GoCommand
    turn: int
    ply: int
    released: threading.Event = field(default_factory=threading.Event)  # stop / ponderhit arrived


class UsiEngine:
    def __init__(self, out: Callable[[str], None] | None = None, engine_dir: Path | None = None) -> None:
        self._out = out or _stdout_writer()
        self._lock = threading.Lock()
        self.engine_dir = engine_dir or REPO_ROOT / "bin"
        self.options = {o.name: o for o in default_options()}
        self.values: dict[str, Any] = {o.name: o.default for o in self.options.values()}
        self.position: tuple[str, list[int]] = (cshogi.STARTING_SFEN, [])
        self.evaluator: Evaluator | None = None
        self._loaded_key: tuple | None = None
        self.load_error: str | None = None
        self.search: Search | None = None
        self.thinking: _Thinking | None = None
        self.rng = np.random.default_rng()

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
        if self.thinking is None or not self.thinking.thread.is_alive():
            self._ensure_evaluator()
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
            self.position = parse_position(args)
        except ValueError as e:
            self.error(f"position: {e} (position unchanged)")

    def cmd_ponderhit(self) -> None:
        t = self.thinking
        if t is None or not t.go.ponder:
            return
        now = time.monotonic()
        t.go.ponder = False
        b = self._budget(t.go, t.turn, t.ply)
        t.control.target, t.control.hard = now + b.target_ms / 1000, now + b.hard_ms / 1000
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

    def _model_path(self) -> Path | None:
        text = str(self.values["DNN_Model"]).strip()
        if not text:
            return None
        path = Path(text).expanduser()
        return path if path.is_absolute() else (self.engine_dir / path).resolve()

    def _ensure_evaluator(self) -> Evaluator | None:
        """(Re)load the network when model/backend/batch/threads changed; errors become info strings."""
        key = (
            self._model_path(),
            self.values["Backend"],
            self.values["DNN_Batch_Size"],
            self.values["Threads"],
        )
        if key == self._loaded_key:
            return self.evaluator
        if self.evaluator is not None:
            self.evaluator.close()
        self.evaluator, self.search, self._loaded_key = None, None, key
        kwargs: dict[str, Any] = {}
        if self.values["Threads"] and "threads" in inspect.signature(create_evaluator).parameters:
            kwargs["threads"] = self.values["Threads"]
        try:
            ev = create_evaluator(key[0], backend=key[1], max_batch=key[2], log=self.info_string, **kwargs)
            ev.evaluate(1)  # warm up: first calls allocate, compile, autotune
            ev.evaluate(ev.max_batch)
        except Exception as e:
            self.load_error = f"DNN_Model {key[0] or '(default)'}: {_one_line(e)}"
            self.error(self.load_error)
            return None
        self.load_error = None
        self.evaluator = ev
        self.search = Search(ev, self._search_params(), batch_size=key[2])
        return ev

    def _search_params(self) -> SearchParams:
        v = self.values
        return SearchParams(
            c_init=v["C_init"] / 100,
            c_base=float(v["C_base"]),
            c_fpu_reduction=v["C_fpu_reduction"] / 100,
            c_init_root=v["C_init_root"] / 100,
            c_base_root=float(v["C_base_root"]),
            c_fpu_reduction_root=v["C_fpu_reduction_root"] / 100,
            softmax_temperature=v["Softmax_Temperature"] / 100,
            draw_value_black=v["Draw_Value_Black"] / 1000,
            draw_value_white=v["Draw_Value_White"] / 1000,
            max_moves=v["Draw_Ply"] or None,
            node_limit=v["UCT_NodeLimit"],
            mode=v["Search_Mode"],
            gumbel_considered=v["Gumbel_Considered"],
        )

    # ----- go -----

    def _budget(self, go: GoCommand, turn: int, ply: int) -> timeman.Budget:
        if go.movetime is not None:
            return timeman.Budget(go.movetime, go.movetime)
        clock = go.clock(turn) or timeman.Clock(byoyomi=DEFAULT_GO_MS)
        return timeman.budget(clock, ply, self.values["Byoyomi_Margin"], self.values["Time_Margin"])

    def cmd_go(self, args: list[str]) -> None:
        try:
            go = parse_go(args)
        except ValueError as e:
            self.error(f"go: {e}")
            return
        self._stop(wait=True)
        sfen, moves = self.position
        board = cshogi.Board(sfen)
        for m in moves:
            board.push(m)
        control = SearchControl()
        if go.mate is None:
            if go.ponder or go.infinite:
                control.infinite = True
            elif go.nodes is None or go.clock(board.turn) is not None or go.movetime is not None:
                b = self._budget(go, board.turn, board.move_number)
                control.target = control.start + b.target_ms / 1000
                control.hard = control.start + b.hard_ms / 1000
        playouts = go.nodes or self.values["Const_Playout"] or None
        control.max_playouts = playouts
        target = self._go_mate if go.mate is not None else self._think
        thread = threading.Thread(target=target, name="search", daemon=True)
        self.thinking = _Thinking(thread, control, go, board.turn, board.move_number)
        thread.start()

    def _wait_release(self, t: _Thinking) -> None:
        """USI: while pondering or in go infinite, bestmove waits for stop (or ponderhit)."""
        while (t.go.ponder or t.go.infinite) and not t.control.stopped:
            t.released.wait()
            t.released.clear()

    def _go_mate(self) -> None:
        t = self.thinking
        try:
            board = self._root_board()
            deadline = None if t.go.mate < 0 else t.control.start + t.go.mate / 1000
            if board.is_check():
                result = MateResult(None, proven_none=True)  # df-pn solves mates for the attacker only
            else:
                depth = self.values["Mate_Root_Search"] or MAX_DEPTH
                result = mate_search(board, depth, deadline, lambda: t.control.stopped)
        except Exception as e:
            self._report_exception(e)
            result = MateResult(None)
        if result.pv:
            self.send("checkmate " + " ".join(cshogi.move_to_usi(m) for m in result.pv))
        else:
            self.send("checkmate nomate" if result.proven_none else "checkmate timeout")

    def _root_board(self) -> cshogi.Board:
        sfen, moves = self.position
        board = cshogi.Board(sfen)
        for m in moves:
            board.push(m)
        return board

    def _think(self) -> None:
        t = self.thinking
        board = self._root_board()
        sfen, moves = self.position
        try:
            answer = self._decide(t, board, sfen, moves)
        except Exception as e:
            self._report_exception(e)
            answer = _safe_move(board)
        self._wait_release(t)
        self.send(answer)

    def _report_exception(self, e: Exception) -> None:
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        loc = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
        self.error(f"search failed ({type(e).__name__}: {_one_line(e)}{loc}); playing a safe move")

    def _decide(self, t: _Thinking, board: cshogi.Board, sfen: str, moves: list[int]) -> str:
        """The bestmove line for the root position."""
        if board.is_game_over():
            return "bestmove resign"
        if board.is_nyugyoku():
            return "bestmove win"
        mate = self._root_mate(t, board)
        if mate is not None:
            self.send(
                f"info depth {len(mate)} score mate {len(mate)} pv " + " ".join(map(cshogi.move_to_usi, mate))
            )
            return self._bestmove(mate[0], mate[1] if len(mate) > 1 else None)
        ev = self._ensure_evaluator()
        if ev is None:
            self.error(f"{self.load_error}; playing the first legal move")
            return _safe_move(board)
        if self.values["Search_Mode"] == "policy":
            return self._policy_play(ev, board)
        search = self.search
        search.params = self._search_params()
        search.set_position(sfen, moves, max_reuse_plies=4 if self.values["ReuseSubtree"] else -1)
        if search.params.mode == "gumbel" and t.control.max_playouts is None:
            t.control.max_playouts = self.values["Gumbel_Simulations"]
        interval = self.values["PV_Interval"] / 1000
        result = search.run(t.control, on_info=self._send_info, info_interval=interval, rng=self.rng)
        self._send_info(result)
        if result.bestmove is None:
            return "bestmove resign"
        if result.mate_plies is None and result.value < self.values["Resign_Threshold"] / 1000:
            return "bestmove resign"
        return self._bestmove(result.bestmove, result.ponder)

    def _root_mate(self, t: _Thinking, board: cshogi.Board) -> list[int] | None:
        depth = self.values["Mate_Root_Search"]
        if depth <= 0 or board.is_check():
            return None
        m1 = board.mate_move_in_1ply()
        if m1:
            return [m1]
        nodes = self.values["Mate_Root_Nodes"]
        if t.control.hard is not None:  # at most a quarter of the move's time
            left_ms = (t.control.hard - time.monotonic()) * 1000
            nodes = min(nodes, int(left_ms / 4 * 1000))
        if nodes < 1000:
            return None
        return dfpn(board, depth, nodes).pv

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

    def _send_info(self, r: SearchResult) -> None:
        self.send(format_info(r, self.values["UCT_NodeLimit"]))


def format_info(r: SearchResult, node_limit: int) -> str:
    ms = int(r.elapsed * 1000)
    nps = int(r.playouts / r.elapsed) if r.elapsed > 0 else 0
    score = f"mate {r.mate_plies}" if r.mate_plies else f"cp {value_to_eval(r.value)}"
    line = (
        f"info depth {r.depth} seldepth {r.seldepth} nodes {r.playouts} nps {nps} time {ms}"
        f" hashfull {min(1000, r.nodes * 1000 // max(node_limit, 1))} score {score}"
    )
    if r.pv:
        line += " pv " + " ".join(cshogi.move_to_usi(m) for m in r.pv)
    return line


def _safe_move(board: cshogi.Board) -> str:
    """A legal answer without the network: a mate in one, else the first legal move, else resign."""
    if board.is_game_over():
        return "bestmove resign"
    m = 0 if board.is_check() else board.mate_move_in_1ply()
    return f"bestmove {cshogi.move_to_usi(m or next(iter(board.legal_moves)))}"


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _stdout_writer() -> Callable[[str], None]:
    def write(line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):  # the GUI is gone
            raise SystemExit(0) from None

    return write


def main() -> int:
    engine_dir = Path(sys.argv[0]).resolve().parent
    sys.stdin.reconfigure(encoding="utf-8", errors="replace")
    engine = UsiEngine(engine_dir=engine_dir)
    engine.run(sys.stdin)
    return 0
