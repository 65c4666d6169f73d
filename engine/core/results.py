"""How a game's end is written, without cshogi: hcpe3's result byte (the winner in bits 0-1, the reason
in the bits above) and the length at which a game is drawn. engine/core/rules.py decides the ends.
"""

# The winner: the same values as cshogi.DRAW/BLACK_WIN/WHITE_WIN.
DRAW, BLACK_WIN, WHITE_WIN = 0, 1, 2
RESULT_MASK = 0x3
# The reason bits.
SENNICHITE = 0x4
NYUGYOKU = 0x8
MAX_MOVES = 0x10
DEFAULT_MAX_MOVES = 320
