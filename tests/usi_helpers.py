"""Shared by the USI tests: a hand-built material-counting network and a random-move USI engine."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from engine.core.network import build, preset, save_checkpoint

# dlshogi feature planes: own pieces P L N S B R G K +P +L +N +S +B +R at 0..13, the opponent's at 31..44;
# hand counts (thermometer planes, uniform over the board): own P8 L4 N4 S4 G4 B2 R2 at 0..27,
# the opponent's at 28..55.
BOARD_VALUES = [1, 3, 4, 5, 8, 10, 6, 0, 6, 6, 6, 6, 10, 12]
HAND_VALUES = [1] * 8 + [3] * 4 + [4] * 4 + [5] * 4 + [6] * 4 + [8] * 2 + [10] * 2
OFFSET = 20.0  # keeps every activation where swish(x) ~= x, so the whole network is linear in material
SCALE = 10.0


@torch.no_grad()
def save_material_model(path: Path) -> None:
    """A 'tiny' network whose value logit is material balance / 8 for the side to move and whose policy is
    uniform: what a trained net would at least know, built by hand so tests need no training run."""
    net = build(preset("tiny"), seed=0).eval()
    for p in net.parameters():
        p.zero_()
    for i, v in enumerate(BOARD_VALUES):
        net.l1_1_2.weight[0, i, 0, 0] = v / SCALE
        net.l1_1_2.weight[0, 31 + i, 0, 0] = -v / SCALE
    for j, v in enumerate(HAND_VALUES):
        net.l1_2.weight[0, j, 0, 0] = v / 81 / SCALE
        net.l1_2.weight[0, 28 + j, 0, 0] = -v / 81 / SCALE
    net.norm1.weight[0], net.norm1.bias[0] = 1.0, OFFSET
    net.value_conv1.weight[0, 0, 0, 0] = 1.0
    net.value_norm1.weight[0] = 1.0
    net.value_fc1.weight[0, :81] = 1.0
    net.value_fc1.bias[0] = -81 * OFFSET + OFFSET
    net.value_fc2.weight[0, 0] = SCALE / 8
    net.value_fc2.bias[0] = -OFFSET * SCALE / 8
    save_checkpoint(path, net)


RANDOM_ENGINE = """import random
import sys

import cshogi

board = cshogi.Board()
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
for line in sys.stdin:
    t = line.split()
    if not t:
        continue
    if t[0] == "usi":
        print("id name RandomMover\\nusiok", flush=True)
    elif t[0] == "isready":
        print("readyok", flush=True)
    elif t[0] == "position":
        board.set_sfen(cshogi.STARTING_SFEN if t[1] == "startpos" else " ".join(t[2:6]))
        for m in t[t.index("moves") + 1 :] if "moves" in t else []:
            board.push_usi(m)
    elif t[0] == "go":
        moves = list(board.legal_moves)
        print("bestmove " + (cshogi.move_to_usi(rng.choice(moves)) if moves else "resign"), flush=True)
    elif t[0] == "quit":
        break
"""


def write_random_engine(path: Path) -> Path:
    path.write_text(f"#!{sys.executable}\n{RANDOM_ENGINE}")  # the tests' python: it has cshogi
    path.chmod(0o755)
    return path
