"""How `bin/analyze` searches each position and judges each move (light: bin/analyze reads its defaults
before it imports the engine's side)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.core.moves import MAX_LEGAL_MOVES

DEFAULT_NODES = 1000
DEFAULT_MULTIPV = 5
MAX_MULTIPV = MAX_LEGAL_MOVES  # the engine's MultiPV range


@dataclass(frozen=True)
class Thresholds:
    """A move that costs its player at least this much win probability is flagged."""

    mistake: float = 0.10
    blunder: float = 0.20

    def flag(self, loss: float) -> str | None:
        if loss >= self.blunder:
            return "blunder"
        return "mistake" if loss >= self.mistake else None


@dataclass
class Settings:
    """The search of each position and the judging of moves."""

    nodes: int | None = None  # go nodes N; with neither limit, DEFAULT_NODES
    byoyomi: int | None = None  # else go byoyomi MS
    multipv: int = DEFAULT_MULTIPV
    model: Path | None = None  # None: the engine's default model
    options: dict[str, str] = field(default_factory=dict)  # more engine options
    thresholds: Thresholds = field(default_factory=Thresholds)

    @property
    def go(self) -> str:
        if self.byoyomi is not None:
            return f"go btime 0 wtime 0 byoyomi {self.byoyomi}"
        return f"go nodes {self.nodes or DEFAULT_NODES}"

    @property
    def limit(self) -> str:
        if self.byoyomi is not None:
            return f"byoyomi {self.byoyomi} ms"
        return f"{self.nodes or DEFAULT_NODES} nodes"

    def record(self) -> dict:
        """The settings as the JSON keeps them (a partial game resumes only under the same)."""
        model = str(self.model.resolve()) if self.model else "default"
        return {"limit": self.limit, "multipv": self.multipv, "model": model, "options": self.options}
