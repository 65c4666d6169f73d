"""USI `position` parsing and validation without torch, shared by the engine and the greedy player.

Validated here because cshogi aborts the whole process (C++ terminate) on a malformed SFEN, and
`Board.is_legal` accepts some impossible promotions: moves are matched against the legal-move list.
"""

from __future__ import annotations

import random
import re

import cshogi
import numpy as np

_PIECE_MAX = {"k": 2, "r": 2, "b": 2, "g": 4, "s": 4, "n": 4, "l": 4, "p": 18}
_RANK_RE = re.compile(r"(\+?[KRBGSNLPkrbgsnlp]|[1-9])")
_HAND_RE = re.compile(r"(\d*)([RBGSNLPrbgsnlp])")


def check_sfen(sfen: str, both_kings: bool = True) -> None:
    """Raise ValueError unless `sfen` is a well-formed position cshogi can load safely. `both_kings`
    False admits a tsume problem's position, where the attacker has no king (one side still needs one:
    a mate search needs a king to mate)."""
    parts = sfen.split()
    if len(parts) not in (3, 4):
        raise ValueError(f"sfen needs board, side, hand and move number: {sfen!r}")
    board, side, hand = parts[:3]
    if len(parts) == 4 and not (parts[3].isdigit() and int(parts[3]) >= 1):
        raise ValueError(f"bad move number {parts[3]!r}")
    if side not in ("b", "w"):
        raise ValueError(f"side to move must be b or w, got {side!r}")
    counts: dict[str, int] = {}
    kings = {"K": 0, "k": 0}
    pawn_files: set[tuple[str, int]] = set()
    ranks = board.split("/")
    if len(ranks) != 9:
        raise ValueError(f"board needs 9 ranks, got {len(ranks)}")
    for r, rank in enumerate(ranks):
        tokens = _RANK_RE.findall(rank)
        if "".join(tokens) != rank:
            raise ValueError(f"bad rank {rank!r}")
        file = 0
        for tok in tokens:
            if tok.isdigit():
                file += int(tok)
                continue
            piece = tok[-1]
            promoted = tok.startswith("+")
            if promoted and piece.lower() in "kg":
                raise ValueError(f"{tok!r} cannot be promoted")
            if piece in kings:
                kings[piece] += 1
            black = piece.isupper()
            from_end = r if black else 8 - r  # ranks from the far edge for this piece's owner
            if not promoted and (
                piece.lower() in "pl" and from_end == 0 or piece.lower() == "n" and from_end < 2
            ):
                raise ValueError(f"{tok!r} on rank {r + 1} can never move")
            if not promoted and piece.lower() == "p":
                if (piece, file) in pawn_files:
                    raise ValueError("two unpromoted pawns on one file (nifu)")
                pawn_files.add((piece, file))
            counts[piece.lower()] = counts.get(piece.lower(), 0) + 1
            file += 1
        if file != 9:
            raise ValueError(f"rank {rank!r} has {file} squares, not 9")
    if both_kings and kings != {"K": 1, "k": 1}:
        raise ValueError("each side needs exactly one king")
    if max(kings.values()) > 1 or not any(kings.values()):
        raise ValueError("each side needs at most one king, and one side a king")
    if hand != "-":
        tokens = _HAND_RE.findall(hand)
        if "".join(n + p for n, p in tokens) != hand:
            raise ValueError(f"bad hand {hand!r}")
        for n, p in tokens:
            counts[p.lower()] = counts.get(p.lower(), 0) + (int(n) if n else 1)
    for p, n in counts.items():
        if n > _PIECE_MAX[p]:
            raise ValueError(f"too many {p.upper()} pieces ({n} > {_PIECE_MAX[p]})")


def parse_position(args: list[str], both_kings: bool = True) -> tuple[str, list[int]]:
    """`position startpos|sfen <sfen> [moves ...]` -> (start sfen, legal moves as cshogi ints);
    `both_kings` as check_sfen's."""
    if not args:
        raise ValueError("position needs startpos or sfen")
    if "moves" in args:
        k = args.index("moves")
        head, usi_moves = args[:k], args[k + 1 :]
    else:
        head, usi_moves = args, []
    if head == ["startpos"]:
        sfen = cshogi.STARTING_SFEN
    elif head and head[0] == "sfen":
        sfen = " ".join(head[1:])
        check_sfen(sfen, both_kings)
        if len(head) == 4:
            sfen += " 1"
    else:
        raise ValueError(f"position needs startpos or sfen, got {' '.join(head)!r}")
    board = cshogi.Board(sfen)
    if not board.is_ok():
        raise ValueError(f"sfen is not a legal position: {sfen!r}")
    moves = []
    for i, usi in enumerate(usi_moves):
        legal = {cshogi.move_to_usi(m): m for m in board.legal_moves}
        if usi not in legal:
            raise ValueError(f"move {i + 1} {usi!r} is illegal")
        board.push(legal[usi])
        moves.append(legal[usi])
    return sfen, moves


def sides_without_king(sfen: str) -> list[int]:
    """The colours (cshogi.BLACK, cshogi.WHITE) without a king in a checked `sfen`: a tsume problem's
    attacker. Kings are never captured, so the start position's answer holds after any moves."""
    board = sfen.split()[0]
    return [color for color, king in ((cshogi.BLACK, "K"), (cshogi.WHITE, "k")) if king not in board]


def board_hcp(board: cshogi.Board) -> np.ndarray:
    """The board's position as its 32-byte Huffman code (hcp), a fresh array."""
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    return hcp


def board_after(sfen: str, moves: list[int]) -> cshogi.Board:
    """The position reached from `sfen` by `moves` (as parse_position returns them)."""
    board = cshogi.Board(sfen)
    for move in moves:
        board.push(move)
    return board


def random_positions(count: int, seed: int = 0, max_plies: int = 150) -> list[cshogi.Board]:
    """Positions along random legal games (both colours to move, pieces in hand, checks): real inputs
    for export checks and benchmarks."""
    rng = random.Random(seed)
    boards = []
    while len(boards) < count:
        board = cshogi.Board()
        for _ in range(rng.randrange(max_plies)):
            moves = list(board.legal_moves)
            if not moves:
                break
            board.push(rng.choice(moves))
        boards.append(board)
    return boards
