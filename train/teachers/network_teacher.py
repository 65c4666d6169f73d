"""One of our networks as a distillation teacher: its policy over the legal moves and its value, read from
the bare position (our features have no history) through any Evaluator backend."""

from __future__ import annotations

from collections.abc import Sequence

from engine.backends.evaluator import Evaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from train.teachers.teacher import GamePosition, Judgement, masked_softmax


class NetworkTeacher:
    """A Teacher over an Evaluator (it owns and closes it)."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev
        self.max_batch = ev.max_batch

    def judge(self, positions: Sequence[GamePosition]) -> list[Judgement]:
        for k, position in enumerate(positions):
            fill_features(position.board, self.ev.x1[k], self.ev.x2[k])
        logits, values = self.ev.evaluate(len(positions))
        judgements = []
        for k, position in enumerate(positions):
            moves, labels = legal_moves_and_labels(position.board)
            judgements.append(Judgement(moves, labels, masked_softmax(logits[k][labels]), float(values[k])))
        return judgements

    def close(self) -> None:
        self.ev.close()
