"""HuffmanCodedPos validation: does an hcp decode to two kings and the 38 other pieces (one, or many at once).

cshogi's Board.set_hcp accepts many garbage codes and can then crash the interpreter, so a file's
positions are checked here first. Apery's layout, read LSB first: 1 bit side to move, 7 bits per king
square, the other 79 squares board-coded, then hands until bit 256.
"""

from __future__ import annotations

import numpy as np

_PIECE_COUNTS = {"P": 18, "L": 4, "N": 4, "S": 4, "G": 4, "B": 2, "R": 2}
# (code, bits) -> base piece type; the promoted and White codes of each piece map to the same letter.
_BOARD_CODES = {
    (0b0, 1): "",
    **{(c, 4): "P" for c in (0b1, 0b1001, 0b101, 0b1101)},
    **{(c, 6): "L" for c in (0b11, 0b100011, 0b10011, 0b110011)},
    **{(c, 6): "N" for c in (0b111, 0b100111, 0b10111, 0b110111)},
    **{(c, 6): "S" for c in (0b1011, 0b101011, 0b11011, 0b111011)},
    **{(c, 6): "G" for c in (0b1111, 0b101111)},
    **{(c, 8): "B" for c in (0b11111, 0b10011111, 0b1011111, 0b11011111)},
    **{(c, 8): "R" for c in (0b111111, 0b10111111, 0b1111111, 0b11111111)},
}
_HAND_CODES = {
    **{(c, 3): "P" for c in (0b0, 0b100)},
    **{(c, 5): "L" for c in (0b1, 0b10001)},
    **{(c, 5): "N" for c in (0b11, 0b10011)},
    **{(c, 5): "S" for c in (0b101, 0b10101)},
    **{(c, 5): "G" for c in (0b111, 0b10111)},
    **{(c, 7): "B" for c in (0b11111, 0b1011111)},
    **{(c, 7): "R" for c in (0b111111, 0b1111111)},
}


def _read_code(bits: int, pos: int, table: dict[tuple[int, int], str]) -> tuple[str | None, int]:
    for n in range(1, 9):
        piece = table.get(((bits >> pos) & ((1 << n) - 1), n))
        if piece is not None:
            return piece, pos + n
    return None, pos


def is_valid_hcp(hcp: np.ndarray | bytes) -> bool:
    """True if `hcp` decodes to exactly 256 bits holding two kings and all 38 other pieces."""
    raw = bytes(hcp)
    if len(raw) != 32:
        return False
    bits = int.from_bytes(raw, "little")
    kings = ((bits >> 1) & 0x7F, (bits >> 8) & 0x7F)
    if kings[0] >= 81 or kings[1] >= 81 or kings[0] == kings[1]:
        return False
    counts = dict.fromkeys(_PIECE_COUNTS, 0)
    pos = 15
    for sq in range(81):
        if sq in kings:
            continue
        piece, pos = _read_code(bits, pos, _BOARD_CODES)
        if piece is None or pos > 256:
            return False
        if piece:
            counts[piece] += 1
    while pos < 256:
        piece, pos = _read_code(bits, pos, _HAND_CODES)
        if piece is None or pos > 256:
            return False
        counts[piece] += 1
    return counts == _PIECE_COUNTS


_PIECE_INDEX = {"": 0, **{p: i + 1 for i, p in enumerate(_PIECE_COUNTS)}}
# Piece counts packed 7 bits a piece type (index 0, empty squares, included): one add a step.
_EXPECTED_PACKED = sum(n << (7 * _PIECE_INDEX[p]) for p, n in _PIECE_COUNTS.items())


def _code_table(table: dict[tuple[int, int], str]) -> tuple[np.ndarray, np.ndarray]:
    """(code length, packed count of its piece) for every value of the next 8 bits; length 0: no
    code starts there."""
    lengths, counts = np.zeros(256, np.int64), np.zeros(256, np.int64)
    for v in range(256):
        piece, n = _read_code(v, 0, table)
        if piece is not None:
            lengths[v], counts[v] = n, 1 << (7 * _PIECE_INDEX[piece])
    return lengths, counts


_BOARD_TABLE = _code_table(_BOARD_CODES)
_HAND_TABLE = _code_table(_HAND_CODES)


def valid_hcps(hcps: np.ndarray) -> np.ndarray:
    """`is_valid_hcp` of every row of uint8 [N, 32] at once: the codes of all rows are decoded in step
    (a board square or a hand piece a step), so whole files can be checked before cshogi reads them
    (one flipped bit can make cshogi crash the interpreter)."""
    raw = np.ascontiguousarray(hcps).view(np.uint8).reshape(-1, 32).astype(np.int64)
    n = len(raw)
    padded = np.zeros((n, 34), np.int64)  # zero bytes past the end: reads there see 0 bits, as ints do
    padded[:, :32] = raw
    pairs = (padded[:, :33] | padded[:, 1:] << 8).reshape(-1)  # bytes i and i+1 of each row
    base = np.arange(n) * 33
    kings = (raw[:, 0] >> 1, raw[:, 1] & 0x7F)  # bit 0 is the side to move, then 7 bits a king
    ok = (kings[0] < 81) & (kings[1] < 81) & (kings[0] != kings[1])
    pos = np.full(n, 15, np.int64)
    packed = np.zeros(n, np.int64)

    def step(table: tuple[np.ndarray, np.ndarray], active: np.ndarray) -> None:
        nonlocal ok, pos, packed
        bits = pairs[base + np.minimum(pos >> 3, 32)] >> (pos & 7) & 0xFF
        length = table[0][bits] * active
        ok &= ~active | (length > 0)
        pos += length
        packed += table[1][bits] * active
        ok &= pos <= 256

    for sq in range(81):
        step(_BOARD_TABLE, ok & (kings[0] != sq) & (kings[1] != sq))
    for _ in range(sum(_PIECE_COUNTS.values())):
        active = ok & (pos < 256)
        if not active.any():
            break
        step(_HAND_TABLE, active)
    return ok & (pos == 256) & (packed >> 7 == _EXPECTED_PACKED >> 7)
