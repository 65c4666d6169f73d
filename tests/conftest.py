"""Shared fixtures: positions from random legal games (both colours, drops, promotions, checks) and an
untrained tiny network for the engine tests."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import cshogi
import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def random_boards(count: int, seed: int = 0, max_plies: int = 160) -> list[cshogi.Board]:
    """Boards sampled along random games; captures are preferred so hands fill and drops appear."""
    rng = random.Random(seed)
    boards: list[cshogi.Board] = []
    while len(boards) < count:
        board = cshogi.Board()
        for _ in range(rng.randrange(max_plies)):
            moves = list(board.legal_moves)
            if not moves:
                break
            captures = [m for m in moves if cshogi.move_cap(m)]
            board.push(rng.choice(captures) if captures and rng.random() < 0.7 else rng.choice(moves))
            if rng.random() < 0.1:
                boards.append(board.copy())
        boards.append(board.copy())
    return boards[:count]


@pytest.fixture(scope="session")
def positions() -> list[cshogi.Board]:
    return random_boards(300, seed=1)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """An untrained 'tiny' network checkpoint: the engine runs fast, its moves mean nothing."""
    from engine.core.network import build, preset, save_checkpoint

    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    save_checkpoint(path, build(preset("tiny"), seed=0))
    return path
