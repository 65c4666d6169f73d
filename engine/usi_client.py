"""The USI client: an engine run as a child process, spoken to with deadlines, and what its answers mean.

`UsiProcess` is cshogi's `usi.Engine` made safe for unattended play (match arbiter, corpus, self-play
against an external engine): every read has a deadline, a dead or hung engine raises `EngineFailure`,
and the engine can be restarted and is always told to quit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import cshogi.usi

from engine.core.score import eval_to_value
from engine.errors import UserError

STARTPOS = "startpos"
DEFAULT_MOVE_TIMEOUT = 60.0  # seconds on top of the byoyomi before an engine loses on time


def parse_usi_options(items: Iterable[str]) -> dict[str, str]:
    """`NAME=VALUE` strings (as given to --usi-option) -> {name: value}; UserError if malformed."""
    options: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UserError(f"--usi-option {item!r}: expected NAME=VALUE (a name without spaces)")
        options[name.strip()] = value.strip()
    return options


def usi_score_to_value(score: str | None) -> float:
    """The engine's `score cp N` / `score mate N` (its own side-to-move view) as a win probability;
    0.5 (eval 0) when it gave none."""
    kind, _, value = (score or "").partition(" ")
    if kind == "mate" and value:
        return 0.0 if value.startswith("-") else 1.0
    if kind == "cp":
        with contextlib.suppress(ValueError):
            return float(eval_to_value(int(value)))
    return 0.5


def _info_field(words: list[str], key: str, width: int = 1) -> str | None:
    """The `width` words after `key` in an info line's words (`score cp 31`), None if it has no `key`."""
    if key not in words:
        return None
    k = words.index(key)
    return " ".join(words[k + 1 : k + 1 + width]) or None


@dataclass(frozen=True)
class GoLimit:
    """How long an engine searches each move: `go nodes N`, `go depth N` and/or `go byoyomi MS`. Engines
    differ in what they obey (gpsusi aborts on `go nodes`), so each engine of a match has its own."""

    nodes: int | None = None
    depth: int | None = None
    byoyomi: int | None = None  # milliseconds

    def settings(self) -> dict[str, int]:
        """The limits given, as `UsiProcess.go` keywords."""
        pairs = (("nodes", self.nodes), ("depth", self.depth), ("byoyomi", self.byoyomi))
        return {k: v for k, v in pairs if v is not None}

    def validate(self, engine: int) -> None:
        """UserError naming engine 0's flags (--nodes...) or engine 1's (--nodes2...) unless usable."""
        who, suffix = f"engine {engine + 1}", "2" if engine else ""
        if not self.settings():
            flags = f"--nodes{suffix}, --depth{suffix} or --byoyomi{suffix}"
            raise UserError(f"{who}: give a search limit ({flags})")
        for name, v in self.settings().items():
            if v <= 0:
                raise UserError(f"{who}: --{name}{suffix} must be positive, got {v}")


def add_go_limit_flags(parser: argparse.ArgumentParser) -> None:
    """--nodes/--depth/--byoyomi (engine 1, and engine 2 unless it has its own) and --nodes2/--depth2/
    --byoyomi2 (engine 2), for the tools that run two engines."""
    for suffix, whose in (("", "engine 1's (and engine 2's unless it has its own)"), ("2", "engine 2's")):
        g = parser.add_argument_group(f"search limit, {whose}")
        g.add_argument(f"--nodes{suffix}", type=int, metavar="N", help="go nodes N")
        g.add_argument(f"--depth{suffix}", type=int, metavar="N", help="go depth N")
        g.add_argument(f"--byoyomi{suffix}", type=int, metavar="MS", help="go byoyomi MS (time per move)")


def go_limits_from_flags(args: argparse.Namespace) -> tuple[GoLimit, GoLimit]:
    """Engine 1's and engine 2's limits from `add_go_limit_flags`' flags, validated."""
    first = GoLimit(args.nodes, args.depth, args.byoyomi)
    first.validate(0)
    second = GoLimit(args.nodes2, args.depth2, args.byoyomi2)
    if not second.settings():
        return first, first
    second.validate(1)
    return first, second


class EngineFailure(Exception):
    """The engine process died, closed its output or (`timed_out`) did not answer in time."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass
class EngineSpec:
    """How to start one engine: a command line (shell-quoted words) and USI options to set."""

    command: str
    options: dict[str, str] = field(default_factory=dict)
    name: str | None = None

    @property
    def argv(self) -> list[str]:
        try:
            argv = shlex.split(self.command)
        except ValueError as e:
            raise UserError(f"engine command {self.command!r}: {e}") from None
        if not argv:
            raise UserError("empty engine command")
        return argv

    @property
    def label(self) -> str:
        return self.name or Path(self.argv[0]).name


class UsiProcess(cshogi.usi.Engine):
    """cshogi's Engine, made safe for unattended matches: the command may have arguments, stderr
    goes to a file (an unread pipe would stall a chatty engine), and every read has a deadline and
    notices end of output, so a dead or hung engine raises EngineFailure instead of blocking."""

    def __init__(self, spec: EngineSpec, timeout: float = DEFAULT_MOVE_TIMEOUT) -> None:
        self.spec = spec
        self.timeout = timeout
        self.last_score: str | None = None
        self.last_nodes: int | None = None  # the `nodes` of the search's last info line
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: IO[bytes] | None = None
        self._retired = False
        super().__init__(spec.command, connect=False)

    # ----- process -----

    def connect(self, listener: Any = None) -> None:
        argv = self.spec.argv
        exe = Path(argv[0])
        if exe.parent != Path("") and exe.exists():  # run in its folder, as cshogi does, so make it absolute
            exe = Path(os.path.abspath(exe))  # not resolve(): a venv's python is a symlink out of the venv
            argv[0] = str(exe)
        self._stderr = tempfile.TemporaryFile()
        self._lines = queue.Queue()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=str(exe.parent) if exe.parent != Path("") else None,
            )
        except OSError as e:
            raise UserError(f"engine {self.spec.command!r}: cannot start: {e.strerror or e}") from None
        # The queue is handed over, not looked up: after a restart the old process's reader, still
        # draining to its end, must not put its end-of-output into the new process's queue.
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines), daemon=True).start()
        try:
            self._send("usi")
            self.name = self.spec.label
            while (line := self._read(self.timeout)) != "usiok":
                if line.startswith("id name "):
                    self.name = self.spec.name or line[8:]
            for key, value in self.spec.options.items():
                self.setoption(key, value)
            self.isready()
        except EngineFailure as e:
            self.close()
            raise UserError(f"engine {self.spec.command!r} failed to start: {e}") from None

    @staticmethod
    def _pump(stdout: IO[bytes], lines: queue.Queue[str | None]) -> None:
        for raw in stdout:
            lines.put(raw.decode("utf-8", "replace").strip())
        lines.put(None)

    def _send(self, cmd: str) -> None:
        try:
            self.proc.stdin.write(cmd.encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError, AttributeError):  # AttributeError: closed (proc None)
            raise EngineFailure(f"{self.name}: engine exited{self._stderr_tail()}") from None

    def _read(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise EngineFailure(f"{self.name}: no answer within {timeout:g}s", timed_out=True) from None
        if line is None:
            self._lines.put(None)  # stay at end of output for later reads
            raise EngineFailure(f"{self.name}: engine exited{self._stderr_tail()}")
        return line

    def _stderr_tail(self) -> str:
        stderr = self._stderr
        if stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile by retire() in another thread
            stderr.seek(0, os.SEEK_END)
            size = stderr.tell()
            stderr.seek(max(0, size - 300))
            tail = stderr.read().decode("utf-8", "replace").strip().splitlines()
            if tail:
                return f" (stderr: {tail[-1]})"
        return ""

    def restart(self) -> None:
        self.close()
        if not self._retired:
            self.connect()

    def retire(self) -> None:
        """Close for good, from another thread too: a game in play there fails (EngineFailure) and its
        restart starts nothing."""
        self._retired = True
        self.close(grace=0.5)  # an interrupt: no time for an engine that does not read `quit`

    def close(self, grace: float = 5.0) -> None:
        """quit, then kill if the engine has not exited after `grace` seconds. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
                proc.stdin.close()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr, self._stderr = self._stderr, None  # taken once: retire() may close from another thread
        if stderr is not None:
            with contextlib.suppress(OSError, ValueError):  # that thread may be reading its tail
                stderr.close()

    def quit(self, listener: Any = None) -> None:
        self.close()

    # ----- protocol (cshogi's writers go through stdin directly; these read with deadlines) -----

    def setoption(self, name: str, value: str | int, listener: Any = None) -> None:
        self._send(f"setoption name {name} value {value}")

    def usinewgame(self, listener: Any = None) -> None:
        self._send("usinewgame")

    def position(self, moves: list[str] | None = None, sfen: str = STARTPOS, listener: Any = None) -> None:
        self._send(f"position {sfen}" + (" moves " + " ".join(moves) if moves else ""))

    def gameover(self, result: str | None = None, listener: Any = None) -> None:
        self._send("gameover" + (f" {result}" if result else ""))

    def isready(self, listener: Any = None) -> None:
        self._send("isready")
        while self._read(max(self.timeout, 600.0)) != "readyok":  # model loading may take long
            pass

    def go(
        self,
        ponder: bool = False,
        btime: int | None = None,
        wtime: int | None = None,
        byoyomi: int | None = None,
        binc: int | None = None,
        winc: int | None = None,
        nodes: int | None = None,
        listener: Any = None,
        depth: int | None = None,
    ) -> tuple[str, str | None]:
        cmd = "go"
        if byoyomi is not None:
            cmd += f" btime 0 wtime 0 byoyomi {byoyomi}"
        if nodes is not None:
            cmd += f" nodes {nodes}"
        if depth is not None:
            cmd += f" depth {depth}"
        self._send(cmd)
        deadline = time.monotonic() + self.timeout + (byoyomi or 0) / 1000
        self.last_score = self.last_nodes = None
        while True:
            line = self._read(max(0.0, deadline - time.monotonic()))
            words = line.split()
            if words[:1] == ["info"] and words[1:2] != ["string"]:
                self.last_score = _info_field(words, "score", 2) or self.last_score
                nodes = _info_field(words, "nodes")
                if nodes is not None and nodes.isdigit():
                    self.last_nodes = int(nodes)
            elif words[:1] == ["bestmove"]:
                if len(words) < 2:
                    return "resign", None
                return words[1], words[3] if len(words) >= 4 and words[2] == "ponder" else None


@contextlib.contextmanager
def started(specs: Sequence[EngineSpec], timeout: float = DEFAULT_MOVE_TIMEOUT) -> Iterator[list[UsiProcess]]:
    """Start the engines (usi, options, isready); always quit them on the way out."""
    engines: list[UsiProcess] = []
    try:
        for spec in specs:
            engine = UsiProcess(spec, timeout)
            engines.append(engine)
            engine.connect()
        yield engines
    finally:
        for engine in engines:
            engine.close()
