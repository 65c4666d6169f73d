"""The USI `go` command: its parameters parsed leniently, and the time plan they give for the move."""

from __future__ import annotations

from dataclasses import dataclass

import cshogi

from engine.play import timeman

DEFAULT_GO_MS = 1000  # a bare `go` (no clock, no limit) thinks this long

_GO_INT = ("btime", "wtime", "binc", "winc", "byoyomi", "nodes", "movetime")
_GO_WORDS = {*_GO_INT, "infinite", "ponder", "mate"}


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


def parse_go(args: list[str]) -> tuple[GoCommand, list[str]]:
    """The `go` command and a warning for each argument it could not use. Nothing raises: the GUI
    waits for a bestmove whatever it sent, so a bad argument is skipped, never the move."""
    go = GoCommand()
    warnings = []
    i = 0
    while i < len(args):
        key = args[i]
        value = args[i + 1] if i + 1 < len(args) and args[i + 1] not in _GO_WORDS else None
        i += 1 if value is None else 2
        if key in ("infinite", "ponder"):
            setattr(go, key, True)
            if value is not None:
                i -= 1  # not this keyword's value: read it as the next argument
        elif key == "mate":
            if value is None or value == "infinite":
                go.mate = -1
            elif value.isdigit():
                go.mate = int(value)
            else:
                go.mate = DEFAULT_GO_MS
                warnings.append(f"go mate needs milliseconds or infinite, got {value!r}: {DEFAULT_GO_MS} ms")
        elif key in _GO_INT:
            if value is not None and value.lstrip("-").isdigit():
                setattr(go, key, int(value))
            else:
                warnings.append(f"go {key} needs an integer, got {value or 'nothing'!r}: ignored")
        else:
            warnings.append(f"go: unknown parameter {key!r}: ignored")
            if value is not None:
                i -= 1
    return go, warnings


def time_budget(go: GoCommand, turn: int, ply: int, byoyomi_margin: int, time_margin: int) -> timeman.Budget:
    """The plan for a timed `go`: `movetime` as asked, else from the side to move's clock (a bare `go`
    as if it had DEFAULT_GO_MS of byoyomi); never more than the clock offers now."""
    if go.movetime is not None:
        ms = max(go.movetime, timeman.MIN_THINK_MS)
        return timeman.Budget(ms, ms, saving_ms=0)  # the time is given for this move alone
    clock = go.clock(turn) or timeman.Clock(byoyomi=DEFAULT_GO_MS)
    return timeman.budget(clock, ply, byoyomi_margin, time_margin)
