"""miniosl's pretrained policy-value network as a distillation teacher (the optional extra `teacher`).

miniosl (PyPI, the Python interface of OSL; BSD-style licence) ships `pretrained/eval.onnx`, a 2.9M
parameter network whose 176 input planes include the last 7 moves, so it is given the game's history
(on models/heldout/fsf-200k.hcpe its top-1 falls from 39.5 % with it to 18.1 % from the bare positions).
Its 2187 move labels are in its own order: each legal move is matched to its label through the move's
USI string. It never plays a pawn, bishop or rook move that declines a promotion, nor a lance's to the
second farthest rank (its move generator leaves them out), so those get no mass. `value[:, 0]` is in
[-1, 1], positive when the side to move wins (tests/test_teacher.py checks both on positions with a known
winner). Runs through onnxruntime on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cshogi
import miniosl
import numpy as np
import onnxruntime as ort

from engine.core.moves import legal_moves_and_labels
from engine.errors import UserError
from train.teachers.teacher import GamePosition, Judgement, masked_softmax

PLANES = len(miniosl.channel_id)  # 176


def default_model() -> Path:
    """The package's own pretrained network."""
    return Path(str(miniosl.pretrained_eval_path()))


def usi_game(position: GamePosition) -> str:
    """The game as a USI `position` argument: start sfen and moves."""
    moves = " ".join(cshogi.move_to_usi(m) for m in position.moves)
    return f"sfen {position.start_sfen}" + (f" moves {moves}" if moves else "")


def miniosl_labels(state: miniosl.State, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """miniosl's label of each cshogi move, and whether miniosl's move generator makes the move."""
    usis = [cshogi.move_to_usi(int(m)) for m in moves]
    labels = np.array([state.to_move(u).policy_move_label for u in usis], np.int64)
    generated = {m.to_usi() for m in state.genmove()}
    return labels, np.array([u in generated for u in usis], bool)


def win_probability(value: np.ndarray) -> np.ndarray:
    """Win probabilities for the side to move from miniosl's value column 0 (in [-1, 1])."""
    return np.clip((np.asarray(value, np.float64) + 1) / 2, 0.0, 1.0)


class MinioslTeacher:
    """A Teacher over miniosl's ONNX network (default: the package's own)."""

    def __init__(self, path: str | Path | None = None, *, max_batch: int = 256, threads: int = 0) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.path = Path(path) if path else default_model()
        if not self.path.is_file():
            raise UserError(f"{self.path}: model not found")
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's errors derive from Exception alone
            raise UserError(f"{self.path}: onnxruntime cannot load it: {str(e).splitlines()[0]}") from None
        shape = [i.shape for i in self.session.get_inputs() if i.name == "input"]
        if not shape or shape[0][1:] != [PLANES, 9, 9]:
            raise UserError(f"{self.path}: not a miniosl network (input [batch, {PLANES}, 9, 9])")
        self.max_batch = max_batch
        self.x = np.zeros((max_batch, PLANES, 9, 9), np.float32)

    def judge(self, positions: Sequence[GamePosition]) -> list[Judgement]:
        states = []
        for k, position in enumerate(positions):
            game = usi_game(position)
            record = miniosl.usi_record(game)
            self.x[k] = record.initial_state.export_features(record.moves)
            states.append(miniosl.usi_state(game))
        logits, values, _aux = self.session.run(None, {"input": self.x[: len(positions)]})
        wins = win_probability(values[:, 0])
        judgements = []
        for k, (position, state) in enumerate(zip(positions, states, strict=True)):
            moves, labels = legal_moves_and_labels(position.board)
            own, generated = miniosl_labels(state, moves)
            policy = masked_softmax(logits[k][own], generated)
            judgements.append(Judgement(moves, labels, policy, float(wins[k])))
        return judgements

    def close(self) -> None:
        """Nothing to release beyond the session, which Python frees."""
