"""How a tool names a USI engine and how long it thinks: the command line and options (EngineSpec), the
limit of each move's search (GoLimit) and the command-line flags that give them.

No cshogi here, so that a command's flags parse without it; engine/usi_client.py runs the engines.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import UserError

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
