"""The USI client: an engine run as a child process, spoken to with deadlines, and what its answers mean.

`UsiProcess` is cshogi's `usi.Engine` made safe for unattended play (match arbiter, corpus, self-play
against an external engine): every read has a deadline, a dead or hung engine raises `EngineFailure`,
and the engine can be restarted and is always told to quit.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import cshogi.usi

from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.usi_spec import (
    DEFAULT_MOVE_TIMEOUT,
    EngineSpec,
    GoLimit,
    add_go_limit_flags,
    go_limits_from_flags,
    parse_usi_options,
)

STARTPOS = "startpos"
ENGINE_ERROR = "info string error:"  # how an engine (ours) says an option or its model failed


def absolute_file_options(options: dict[str, str]) -> dict[str, str]:
    """Option values that name an existing file or folder relative to this process's folder, made
    absolute: the engine runs in its own folder (as cshogi runs it), where a relative name means nothing
    (`bin/match --option1 DNN_Model=runs/x/model.pt`, a loop's `--dir runs/loop`)."""
    return {
        k: os.path.abspath(v) if v and not os.path.isabs(v) and os.path.exists(v) else v
        for k, v in options.items()
    }


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


class EngineFailure(Exception):
    """The engine process died, closed its output or (`timed_out`) did not answer in time."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


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
            for key, value in absolute_file_options(self.spec.options).items():
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
        """An error the engine reports before `readyok` (a refused option, a model that did not load) is
        an EngineFailure: our engine answers readyok anyway, for GUIs, and would then play first legal
        moves that a match would count as its play."""
        self._send("isready")
        errors = []
        while (line := self._read(max(self.timeout, 600.0))) != "readyok":  # model loading may take long
            if line.startswith(ENGINE_ERROR):
                errors.append(line[len(ENGINE_ERROR) :].strip())
        if errors:
            raise EngineFailure(f"{self.name}: {errors[0]}")

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


__all__ = [  # engine.usi_spec's names too: the modules that drive engines import them from here
    "DEFAULT_MOVE_TIMEOUT",
    "STARTPOS",
    "EngineFailure",
    "EngineSpec",
    "GoLimit",
    "UsiProcess",
    "add_go_limit_flags",
    "go_limits_from_flags",
    "parse_usi_options",
    "started",
    "usi_score_to_value",
]
