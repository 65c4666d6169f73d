import cshogi
import cshogi.dlshogi as dl
import numpy as np
import pytest

from engine.core.features import (
    alloc_features,
    current_features2_num,
    ensure_features2,
    features_from_boards,
    features_from_hcps,
)


def reference(board: cshogi.Board) -> tuple[np.ndarray, np.ndarray]:
    f1 = np.zeros((dl.FEATURES1_NUM, 9, 9), np.float32)
    f2 = np.zeros((current_features2_num(), 9, 9), np.float32)
    dl.make_input_features(board, f1, f2)
    return f1, f2


def test_positions_cover_both_colours_and_hands(positions):
    assert {b.turn for b in positions} == {cshogi.BLACK, cshogi.WHITE}
    assert any(sum(h) for b in positions for h in b.pieces_in_hand)
    assert any(b.is_check() for b in positions)


def test_batch_features_equal_cshogi(positions):
    x1, x2 = features_from_boards(positions)
    assert x1.shape == (len(positions), 62, 9, 9) and x2.shape == (len(positions), 57, 9, 9)
    for i, board in enumerate(positions):
        f1, f2 = reference(board)
        np.testing.assert_array_equal(x1[i], f1)
        np.testing.assert_array_equal(x2[i], f2)


def test_features_from_hcps_equal_boards(positions):
    hcps = np.zeros((len(positions), 32), np.uint8)
    for i, board in enumerate(positions):
        board.to_hcp(hcps[i])
    x1, x2 = features_from_hcps(hcps)
    y1, y2 = features_from_boards(positions)
    np.testing.assert_array_equal(x1, y1)
    np.testing.assert_array_equal(x2, y2)
    # cshogi's structured HuffmanCodedPos dtype is accepted too, and buffers are reused in place
    structured = hcps.view(cshogi.HuffmanCodedPos).reshape(-1)
    out = alloc_features(len(positions))
    out[0][:] = 9
    z1, _ = features_from_hcps(structured, out=out)
    assert z1.base is out[0] or z1 is out[0]
    np.testing.assert_array_equal(z1, y1)


def test_nyugyoku_variant_has_119_planes(positions):
    try:
        ensure_features2(119)
        x1, x2 = features_from_boards(positions[:20])
        assert x2.shape[1] == 119
        for i, board in enumerate(positions[:20]):
            f1, f2 = reference(board)
            np.testing.assert_array_equal(x2[i], f2)
    finally:
        ensure_features2(57)
    assert current_features2_num() == 57
    with pytest.raises(ValueError):
        ensure_features2(60)


def mirrored_board(board: cshogi.Board) -> cshogi.Board:
    """Flip files 1<->9 through the SFEN board field (hands and side to move unchanged)."""
    fields = board.sfen().split(" ")
    rows = []
    for row in fields[0].split("/"):
        cells: list[str] = []
        i = 0
        while i < len(row):
            if row[i].isdigit():
                cells += [""] * int(row[i])
                i += 1
            else:
                n = 2 if row[i] == "+" else 1
                cells.append(row[i : i + n])
                i += n
        out, empty = "", 0
        for c in reversed(cells):
            if c:
                out += (str(empty) if empty else "") + c
                empty = 0
            else:
                empty += 1
        rows.append(out + (str(empty) if empty else ""))
    fields[0] = "/".join(rows)
    return cshogi.Board(" ".join(fields))
