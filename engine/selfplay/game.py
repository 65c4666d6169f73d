"""One self-play game in progress: its board, record and RNG, and how a move is chosen and recorded."""

from __future__ import annotations

from concurrent.futures import Future

import cshogi
import numpy as np

from engine.core.position import board_hcp
from engine.core.rules import NYUGYOKU, win_for
from engine.search.gumbel_search import GumbelResult
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.opponents import OPPONENT_OF, EngineReply, engine_colour
from engine.selfplay.writer import GameRecord
from engine.usi_client import usi_score_to_value


def sample_move(policy: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Opening randomisation: draw from the improved policy sharpened or flattened by 1/temperature."""
    logp = np.log(np.maximum(policy, 1e-300)) / temperature
    p = np.exp(logp - logp.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def engine_reply_outcome(board: cshogi.Board, bestmove: str) -> tuple[int | None, int | None]:
    """(move, None) for a legal move the engine may play here, else (None, result byte): `resign`
    and an illegal move lose, `win` wins if the position is a nyugyoku and loses otherwise."""
    mover = board.turn
    if bestmove == "resign":
        return None, win_for(cshogi.opponent(mover)).result
    if bestmove == "win":
        ok = board.is_nyugyoku()
        return None, (win_for(mover, NYUGYOKU) if ok else win_for(cshogi.opponent(mover))).result
    move = board.move_from_usi(bestmove)
    if not move or not board.is_legal(move):
        return None, win_for(cshogi.opponent(mover)).result
    return move, None


class Game:
    """One game in progress: its board, record, RNG (seeded per game index) and running search, or in
    a game against the USI engine, the engine's pending reply."""

    def __init__(self, index: int, config: SelfPlayConfig) -> None:
        self.index = index
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, index]))
        self.board = cshogi.Board()
        self.engine_colour = engine_colour(index, config)
        self.record = GameRecord(
            board_hcp(self.board), opponent=OPPONENT_OF[self.engine_colour], game_id=index
        )
        self.usi_moves: list[str] = []  # the game so far, for the engine's `position` command
        self.searching = False  # its position is being searched (in its group's SearchGroup)
        self.full = True  # the running search is a full one (its move gets a policy target)
        self.reply: Future[EngineReply] | None = None
        self.may_resign = config.resign_threshold > 0 and self.rng.random() >= config.resign_playout_fraction
        self.would_resign: int | None = None  # in a playout game: the colour that stood below threshold

    @property
    def engine_to_move(self) -> bool:
        return self.board.turn == self.engine_colour

    def _push(self, move: int) -> None:
        if self.engine_colour is not None:
            self.usi_moves.append(cshogi.move_to_usi(move))
        self.board.push(move)

    def play(self, result: GumbelResult, config: SelfPlayConfig) -> int | None:
        """Record the searched position and play a move; returns a result byte if the mover resigns."""
        board, rec = self.board, self.record
        if len(rec) < config.random_plies:
            choice = sample_move(result.policy, config.temperature, self.rng)
        else:
            choice = result.choice
        move = result.moves[choice]
        if self.full:
            candidates = (np.array(result.moves, dtype=np.int64) & 0xFFFF).astype(np.uint16)
            rec.add(
                board_hcp(board), cshogi.move16(move), result.value, candidates, result.labels, result.policy
            )
        else:  # a fast search (playout-cap randomisation): the move and value, no policy target
            rec.add(board_hcp(board), cshogi.move16(move), result.value)
        if config.resign_threshold > 0 and result.value < config.resign_threshold:
            if self.may_resign:
                return win_for(cshogi.opponent(board.turn)).result
            if self.would_resign is None:
                self.would_resign = board.turn
        self._push(move)
        return None

    def play_engine(self, reply: EngineReply) -> int | None:
        """Record and play the engine's move (no policy target); returns a result byte if it ended
        the game (resignation, declaration, illegal move: the latter is not recorded as a move)."""
        move, result = engine_reply_outcome(self.board, reply.bestmove or "resign")
        if move is not None:
            self.record.add(board_hcp(self.board), cshogi.move16(move), usi_score_to_value(reply.score))
            self._push(move)
        return result
