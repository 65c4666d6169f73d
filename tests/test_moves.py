import cshogi
import cshogi.dlshogi as dl
import numpy as np

from engine.core.moves import (
    NUM_MOVE_LABELS,
    label_to_move,
    labels_from_move16,
    legal_moves_and_labels,
    mirror_label_permutation,
    move_label,
)
from tests.test_features import mirrored_board


def test_labels_equal_cshogi_for_every_legal_move(positions):
    seen_drop = seen_promo = False
    for board in positions:
        moves, labels = legal_moves_and_labels(board)
        for m, label in zip(moves, labels, strict=True):
            assert label == dl.make_move_label(int(m), board.turn) == move_label(int(m), board.turn)
            seen_drop |= cshogi.move_is_drop(int(m))
            seen_promo |= cshogi.move_is_promotion(int(m))
        assert ((labels >= 0) & (labels < NUM_MOVE_LABELS)).all()
        # labels are unique among a position's legal moves, so the inverse is well defined
        assert len(set(labels.tolist())) == len(labels)
    assert seen_drop and seen_promo


def test_vectorised_labels_from_move16_arrays(positions):
    move16s, colors, expected = [], [], []
    for board in positions:
        for m in board.legal_moves:
            move16s.append(cshogi.move16(m))
            colors.append(board.turn)
            expected.append(dl.make_move_label(m, board.turn))
    got = labels_from_move16(np.array(move16s, np.uint16), np.array(colors))
    np.testing.assert_array_equal(got, expected)


def test_label_to_move_inverts(positions):
    for board in positions[:100]:
        for m in board.legal_moves:
            assert label_to_move(board, move_label(m, board.turn)) == m
    board = cshogi.Board()
    legal = set(legal_moves_and_labels(board)[1].tolist())
    assert label_to_move(board, next(i for i in range(NUM_MOVE_LABELS) if i not in legal)) is None


def test_mirror_permutation_maps_moves_to_mirrored_moves(positions):
    perm = mirror_label_permutation()
    np.testing.assert_array_equal(perm[perm], np.arange(NUM_MOVE_LABELS))
    for board in positions[:80]:
        mirrored = mirrored_board(board)
        _, labels = legal_moves_and_labels(board)
        _, mirrored_labels = legal_moves_and_labels(mirrored)
        assert set(perm[labels].tolist()) == set(mirrored_labels.tolist())
