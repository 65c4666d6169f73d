#!/usr/bin/env python3
"""Loader throughput: our batch-level memmap loader vs the seed's per-sample Dataset (baseline).

Both read the same generated .data and hcpe files and build the same features with cshogi; the
baseline is the seed article's design (memmap, per-item __getitem__, default collate). Self-play's
hcpe3 is read through dlshogi's hcpe3 cache, which the seed cannot read: that row has ours only.
Usage: python bench/loader.py [--positions N] [--batch-size B] [--samples S] [--workers 0 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from engine.core.features import alloc_features, fill_features  # noqa: E402
from engine.core.moves import NUM_MOVE_LABELS, labels_from_move16  # noqa: E402
from engine.records.formats import DATA, HCPE  # noqa: E402
from train.data import synthetic  # noqa: E402
from train.data.dataset import BatchDataset, EpochBatches, make_loader, open_corpus  # noqa: E402
from train.data.hcpe3_cache import build_hcpe3_cache  # noqa: E402


class SeedDataset(Dataset):
    """The seed's per-sample design: one memmap record and one feature build per __getitem__."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = path, kind
        self.dtype = DATA if kind == "data" else HCPE
        self.n = path.stat().st_size // self.dtype.itemsize
        self._mm = None
        self._board = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self._mm is None:
            self._mm = np.memmap(self.path, self.dtype, "r")
            self._board = cshogi.Board()
        rec = self._mm[i]
        board = self._board
        board.set_hcp(np.asarray(rec["hcp"]))
        x1, x2 = alloc_features(1)
        fill_features(board, x1[0], x2[0])
        if self.kind == "data":
            policy = torch.from_numpy(rec["policy"].copy())
            game = int(rec["result"])
        else:
            policy = torch.zeros(NUM_MOVE_LABELS)
            policy[int(labels_from_move16(rec["bestMove16"], board.turn))] = 1
            game = int(rec["gameResult"])
        result = 0.5 if game == 0 else float((game == 1) == (board.turn == cshogi.BLACK))
        return torch.from_numpy(x1[0]), torch.from_numpy(x2[0]), policy, torch.tensor(result)


def rate(loader, samples: int) -> float:
    it = iter(loader)
    next(it)  # start-up (worker spawn, first batch) is not throughput
    done, start = 0, time.perf_counter()
    for batch in it:
        done += len(batch[-1])
        if done >= samples:
            break
    return done / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--positions", type=int, default=12000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--samples", type=int, default=6000, help="positions timed per measurement")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = {"data": Path(tmp) / "a.data", "hcpe": Path(tmp) / "a.hcpe"}
        synthetic.write_data(files["data"], args.positions, seed=0)
        synthetic.write_hcpe(files["hcpe"], args.positions, seed=1)
        games = Path(tmp) / "a.hcpe3"
        cache = Path(tmp) / "a.hcpe3cache"
        synthetic.write_hcpe3(games, max(1, args.positions // 60), seed=2)
        build_hcpe3_cache(games, cache)
        print(f"{args.positions} positions per file, batch {args.batch_size}, {args.samples} timed samples")
        print(f"{'format':6} {'workers':>7} {'ours pos/s':>12} {'seed pos/s':>12} {'speed-up':>9}")
        for kind, path in [*files.items(), ("hcpe3", cache)]:
            corpus = open_corpus([], [path], 57) if kind == "hcpe3" else open_corpus([(kind, path)], [], 57)
            for w in args.workers:
                sampler = EpochBatches(len(corpus), args.batch_size, seed=0)
                ours = rate(make_loader(BatchDataset(corpus), sampler, w, False), args.samples)
                if kind == "hcpe3":
                    print(f"{kind:6} {w:>7} {ours:>12.0f} {'n/a':>12} {'':>9}")
                    continue
                seed_loader = DataLoader(
                    SeedDataset(path, kind), batch_size=args.batch_size, shuffle=True, num_workers=w
                )
                base = rate(seed_loader, args.samples)
                print(f"{kind:6} {w:>7} {ours:>12.0f} {base:>12.0f} {ours / base:>8.1f}x")


if __name__ == "__main__":
    main()
