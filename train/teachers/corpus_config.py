"""A corpus run's settings (CorpusConfig): the two teachers, the openings, the outputs, checked before any
game; cshogi-free, so that bin/corpus parses its flags without the engine machinery."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.results import DEFAULT_MAX_MOVES
from engine.errors import UserError
from engine.usi_spec import DEFAULT_MOVE_TIMEOUT, EngineSpec, GoLimit

FORMATS = ("hcpe", "hcpe3")


@dataclass
class Teacher:
    """One side of the games: how to start the engine and how long it searches each move."""

    engine: EngineSpec
    limit: GoLimit

    def validate(self, i: int) -> None:
        """UserError naming engine i's flags unless this teacher can play."""
        self.limit.validate(i)
        self.engine.argv  # noqa: B018 (raises UserError for a malformed command)

    def settings(self) -> dict[str, Any]:
        return {"command": self.engine.command, "options": self.engine.options, **self.limit.settings()}


@dataclass
class CorpusConfig:
    out_dir: Path
    teachers: tuple[Teacher, Teacher]  # teacher 0 plays Black in even games
    games: int
    parallel: int = 1
    random_plies: int = 6
    book: Path | None = None  # an OSL opening book: openings along its lines instead of random plies
    book_plies: int = 16
    seed: int = 0
    max_moves: int = DEFAULT_MAX_MOVES
    timeout: float = DEFAULT_MOVE_TIMEOUT
    formats: tuple[str, ...] = ("hcpe",)
    progress: bool = True

    def validate(self) -> None:
        if self.games < 1 or self.parallel < 1 or self.max_moves < 1 or self.timeout <= 0:
            raise UserError("--games, --parallel, --max-moves and --timeout must be positive")
        if self.book is None and self.random_plies < 1:
            raise UserError("--random-plies must be >= 1: deterministic engines need distinct openings")
        if self.book is not None and self.book_plies < 1:
            raise UserError("--book-plies must be >= 1: deterministic engines need distinct openings")
        if not self.formats or set(self.formats) - set(FORMATS):
            raise UserError(f"--format: choose from {', '.join(FORMATS)}, got {','.join(self.formats)}")
        for i, teacher in enumerate(self.teachers):
            teacher.validate(i)

    def settings(self) -> dict[str, Any]:
        """What makes two runs' games alike: a rerun must match, to continue the same corpus."""
        return {
            "teachers": [t.settings() for t in self.teachers],
            **(
                {"book": str(self.book.resolve()), "book_plies": self.book_plies}
                if self.book is not None
                else {"random_plies": self.random_plies}
            ),
            "seed": self.seed,
            "max_moves": self.max_moves,
            "formats": list(self.formats),
        }
