"""The openings of distillation games, for variety: game i starts from a distinct line of an opening book
(`engine.match.openings.book_openings`, the lines strong players choose) or from distinct uniformly random
plies (`random_openings`), or from the start position when neither is given.

With both, game i plays random plies iff floor((i + 1) * share) > floor(i * share), so the random games
are spread evenly and floor(i * share) of them come before game i. Each kind's openings are one
prefix-stable sequence drawn from the seed (the first n of a longer draw are the n of a shorter one),
so game i's opening is decided by (seed, i) alone: a chunk made alone is the chunk of a whole run. Each
opening is used once; a run that needs more distinct openings than exist is refused before any game.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.match.openings import Opening, book_openings, random_openings

DEFAULT_BOOK_PLIES = 16
DEFAULT_RANDOM_SHARE = 0.25  # of the games, when both a book and random plies are given


@dataclass(frozen=True)
class OpeningPlan:
    """Where games start: book lines, random plies, both (`random_share` of the games random) or neither."""

    book: Path | None = None
    book_plies: int = DEFAULT_BOOK_PLIES
    random_plies: int | None = None  # None: no random openings
    random_share: float | None = None  # only with both; None: DEFAULT_RANDOM_SHARE

    def validate(self) -> None:
        if self.book is not None and self.book_plies < 1:
            raise UserError(f"--book-plies must be >= 1, got {self.book_plies}")
        if self.random_plies is not None and self.random_plies < 1:
            raise UserError(f"--random-plies must be >= 1, got {self.random_plies}")
        if self.random_share is not None:
            if self.book is None or self.random_plies is None:
                raise UserError("--random-share needs both --book-openings and --random-plies")
            if not 0 <= self.random_share <= 1:
                raise UserError(f"--random-share must be in [0, 1], got {self.random_share}")
        if self.book is not None and not self.book.is_file():
            raise UserError(f"--book-openings {self.book}: no such file")

    @property
    def share(self) -> float:
        """The share of games with random openings."""
        if self.random_plies is None:
            return 0.0
        if self.book is None:
            return 1.0
        return DEFAULT_RANDOM_SHARE if self.random_share is None else self.random_share

    @property
    def longest(self) -> int:
        """Plies of the longest opening."""
        return max(self.book_plies if self.book is not None else 0, self.random_plies or 0)

    def settings(self) -> dict[str, Any]:
        """What decides the openings (with the seed): a rerun must repeat it."""
        out: dict[str, Any] = {}
        if self.book is not None:
            out |= {"book": str(self.book.resolve()), "book_plies": self.book_plies}
        if self.random_plies is not None:
            out |= {"random_plies": self.random_plies, "random_share": self.share}
        return out


def random_before(game: int, share: float) -> int:
    """How many of games 0..game-1 play random openings."""
    return math.floor(game * share)


def is_random(game: int, share: float) -> bool:
    return random_before(game + 1, share) > random_before(game, share)


def _draw(
    make: Callable[[int, int, int], list[Opening]], count: int, plies: int, seed: int, what: str
) -> list[Opening]:
    """The first `count` openings of `make(count, plies, seed)`; a UserError if there are fewer."""
    if not count:
        return []
    openings = make(count, plies, seed)
    if len(openings) < count:
        raise UserError(f"only {len(openings)} distinct openings of {plies} {what}; {count} needed")
    return openings


class GameOpenings:
    """Game i's opening, for the games before `end`; the openings are drawn once, up front, so a bad book
    or too few distinct lines is refused before any game."""

    def __init__(self, plan: OpeningPlan, seed: int, end: int) -> None:
        self.share = plan.share
        randoms = random_before(end, self.share)
        self.random = _draw(random_openings, randoms, plan.random_plies or 0, seed, "random plies")
        self.book: list[Opening] = []
        if (book := plan.book) is not None:
            what = f"plies in {book}"
            self.book = _draw(partial(book_openings, book), end - randoms, plan.book_plies, seed, what)

    def __getitem__(self, game: int) -> Opening:
        before = random_before(game, self.share)
        if is_random(game, self.share):
            return self.random[before]
        return self.book[game - before] if self.book else Opening()
