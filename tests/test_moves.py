import cshogi
import cshogi.dlshogi as dl
import numpy as np
import pytest

from engine.core.moves import (
    NUM_MOVE_LABELS,
    label_table,
    labels_from_move16,
    legal_moves_and_labels,
    mirror_label_permutation,
)
from tests.test_features import mirrored_board

START = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"
OPENED = "lnsgkgsnl/1r5b1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL {} - 3"

# dlshogi's formula, worked by hand: label = 81 * direction + destination square (square = 9 * (file - 1)
# + rank - 1, both rotated 180 degrees for White). Directions: UP 0, UP_LEFT 1, UP_RIGHT 2, LEFT 3,
# RIGHT 4, DOWN 5, DOWN_LEFT 6, DOWN_RIGHT 7, UP2_LEFT 8, UP2_RIGHT 9, +10 when promoting,
# 20 + piece type - 1 for a drop (pawn, lance, knight, silver, bishop, rook, gold).
KNOWN_LABELS = [
    (START, "7g7f", 0 * 81 + 59),
    (START, "5i4h", 2 * 81 + 34),
    (START, "2h3h", 3 * 81 + 25),
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2", "3c3d", 0 * 81 + 59),
    (OPENED.format("b"), "8i7g", 9 * 81 + 60),
    (OPENED.format("b"), "8h2b+", 12 * 81 + 10),
    (OPENED.format("w"), "2b8h+", 12 * 81 + 10),
    ("4k4/9/9/9/4G4/9/9/9/4K4 b - 1", "5e5f", 5 * 81 + 41),
    ("4k4/9/9/9/4S4/9/9/9/4K4 b - 1", "5e4f", 7 * 81 + 32),
    ("lnsgkg1nl/1r5s1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/7R1/LNSGKGSNL b B 5", "B*5e", 24 * 81 + 40),
    ("lnsgkgsnl/1r5b1/ppppppp1p/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w p 2", "P*2e", 20 * 81 + 67),
]


@pytest.mark.parametrize(("sfen", "usi", "label"), KNOWN_LABELS)
def test_known_dlshogi_labels(sfen, usi, label):
    board = cshogi.Board(sfen)
    move = board.move_from_usi(usi)
    assert board.is_legal(move)
    moves, labels = legal_moves_and_labels(board)
    assert labels[list(moves).index(move)] == label
    assert labels_from_move16(np.array([cshogi.move16(move)]), board.turn)[0] == label
    assert label_table()[board.turn, cshogi.move16(move)] == label


def test_labels_equal_cshogi_for_every_legal_move(positions):
    seen_drop = seen_promo = False
    for board in positions:
        moves, labels = legal_moves_and_labels(board)
        for m, label in zip(moves, labels, strict=True):
            assert label == dl.make_move_label(int(m), board.turn)
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


def test_label_table_covers_exactly_the_valid_move16s():
    table = label_table()
    assert table.shape == (2, 1 << 15)
    valid = table[0] >= 0
    np.testing.assert_array_equal(valid, table[1] >= 0)
    # 81 destinations x (80 sources x 2 promotion flags + 7 drop pieces)
    assert valid.sum() == 81 * (80 * 2 + 7)
    for color in (cshogi.BLACK, cshogi.WHITE):
        labels = table[color, valid]
        assert labels.min() == 0 and labels.max() == NUM_MOVE_LABELS - 1
        for m in np.flatnonzero(valid)[::97]:
            assert table[color, m] == dl.make_move_label(int(m), color)


def test_mirror_permutation_maps_moves_to_mirrored_moves(positions):
    perm = mirror_label_permutation()
    np.testing.assert_array_equal(perm[perm], np.arange(NUM_MOVE_LABELS))
    for board in positions[:80]:
        mirrored = mirrored_board(board)
        _, labels = legal_moves_and_labels(board)
        _, mirrored_labels = legal_moves_and_labels(mirrored)
        assert set(perm[labels].tolist()) == set(mirrored_labels.tolist())
