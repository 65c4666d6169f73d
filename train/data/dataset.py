"""Training data: record files as memory-mapped sources, gathered a whole batch at a time.

The seed's per-sample Dataset spends most of its time in Python per position; here a sampler yields
sorted index arrays, each source fancy-indexes its memory map once per batch, cshogi fills the
preallocated feature arrays, and labels, policy targets and value targets are computed with numpy
over the whole batch. Every source yields the same targets:

- policy: dense [B, 2187] float32 (hcpe: one-hot on bestMove16; hcpe3 cache: candidates' probs;
  .data: the stored policy); an all-zero row means "no policy target".
- result: the game result from the side to move (1 win / 0 loss / 0.5 draw).
- value: the stored evaluation as a win probability (hcpe eval, hcpe3 search value); .data stores no
  evaluation, so it repeats the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import cshogi
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from engine.core.features import FEATURES1_NUM, ensure_features2, features_from_hcps
from engine.core.moves import NUM_MOVE_LABELS, labels_from_move16, mirror_label_permutation
from engine.core.rules import BLACK_WIN, DRAW, RESULT_MASK
from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.records.formats import DATA, EXTENSIONS, HCPE
from train.data.detect import CORPUS_SETTINGS, detect_format
from train.data.hcpe3_cache import Hcpe3Cache, build_hcpe3_cache
from train.data.readers import read_data, read_hcpe, usable_files

RECORD_SUFFIXES = tuple(EXTENSIONS)


class Batch(NamedTuple):
    """One batch (numpy in workers, tensors after the DataLoader converts it; the loader's features
    are uint8, `to_device` makes them float32)."""

    x1: np.ndarray  # float32 [B, 62, 9, 9]
    x2: np.ndarray  # float32 [B, 57|119, 9, 9]
    policy: np.ndarray  # float32 [B, 2187]; all zeros = no policy target
    result: np.ndarray  # float32 [B], side to move's game result
    value: np.ndarray  # float32 [B], stored evaluation as a win probability


def alloc_batch(n: int, planes2: int) -> Batch:
    return Batch(
        np.empty((n, FEATURES1_NUM, 9, 9), np.float32),
        np.empty((n, planes2, 9, 9), np.float32),
        np.zeros((n, NUM_MOVE_LABELS), np.float32),
        np.empty(n, np.float32),
        np.empty(n, np.float32),
    )


def hcp_turns(hcps: np.ndarray) -> np.ndarray:
    """Side to move of each HuffmanCodedPos: its first bit."""
    return np.ascontiguousarray(hcps).view(np.uint8).reshape(-1, 32)[:, 0] & 1


def results_for_turns(game_results: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """Vectorised `train.data.hcpe3_cache.result_for_turn`: 1 won, 0 lost, 0.5 draw for the side to move."""
    game = np.asarray(game_results).astype(np.int64) & RESULT_MASK
    won = (game == BLACK_WIN) == (turns == cshogi.BLACK)
    return np.where(game == DRAW, 0.5, won.astype(np.float32)).astype(np.float32)


def mirror_batch(batch: Batch, rows: np.ndarray) -> None:
    """Left-right mirror the given rows in place: features' file axis and policy labels."""
    if not len(rows):
        return
    batch.x1[rows] = batch.x1[rows][:, :, ::-1, :]
    batch.policy[rows] = batch.policy[rows][:, mirror_label_permutation()]


class Source(ABC):
    """One record file; the memory map is opened lazily so the object pickles into worker processes."""

    kind = ""

    def __init__(self, path: Path, length: int) -> None:
        self.path = path
        self.length = length
        self._records: np.ndarray | None = None

    def __len__(self) -> int:
        return self.length

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_records": None}

    @abstractmethod
    def _open(self) -> np.ndarray: ...

    @property
    def records(self) -> np.ndarray:
        if self._records is None:
            self._records = self._open()
        return self._records

    @abstractmethod
    def gather(self, idx: np.ndarray, out: Batch, lo: int, board: cshogi.Board) -> None:
        """Fill rows lo .. lo+len(idx) of `out` with records `idx` (sorted)."""


class HcpeSource(Source):
    kind = "hcpe"

    def __init__(self, path: Path) -> None:
        super().__init__(path, len(read_hcpe(path)))

    def _open(self) -> np.ndarray:
        return np.memmap(self.path, HCPE, "r", shape=(self.length,))

    def gather(self, idx: np.ndarray, out: Batch, lo: int, board: cshogi.Board) -> None:
        rec = self.records[idx]
        hi = lo + len(idx)
        features_from_hcps(rec["hcp"], out=(out.x1[lo:hi], out.x2[lo:hi]), board=board)
        turns = hcp_turns(rec["hcp"])
        labels = labels_from_move16(rec["bestMove16"], turns)
        ok = labels >= 0
        out.policy[lo + np.flatnonzero(ok), labels[ok]] = 1.0
        out.result[lo:hi] = results_for_turns(rec["gameResult"], turns)
        out.value[lo:hi] = eval_to_value(rec["eval"])


class DataSource(Source):
    kind = "data"

    def __init__(self, path: Path) -> None:
        super().__init__(path, len(read_data(path)))

    def _open(self) -> np.ndarray:
        return np.memmap(self.path, DATA, "r", shape=(self.length,))

    def gather(self, idx: np.ndarray, out: Batch, lo: int, board: cshogi.Board) -> None:
        rec = self.records[idx]
        hi = lo + len(idx)
        features_from_hcps(rec["hcp"], out=(out.x1[lo:hi], out.x2[lo:hi]), board=board)
        out.policy[lo:hi] = rec["policy"]
        out.result[lo:hi] = results_for_turns(rec["result"], hcp_turns(rec["hcp"]))
        out.value[lo:hi] = out.result[lo:hi]


class CacheSource(Source):
    """An hcpe3 cache (dlshogi's random-access layout; result is already from the side to move)."""

    kind = "cache"

    def __init__(self, path: Path) -> None:
        super().__init__(path, len(Hcpe3Cache(path)))

    def _open(self) -> Hcpe3Cache:
        return Hcpe3Cache(self.path)

    def gather(self, idx: np.ndarray, out: Batch, lo: int, board: cshogi.Board) -> None:
        hcps, value, result, candidates = self.records.gather(idx)
        hi = lo + len(idx)
        features_from_hcps(hcps, out=(out.x1[lo:hi], out.x2[lo:hi]), board=board)
        lengths = np.fromiter((len(m) for m, _ in candidates), np.int64, len(candidates))
        if lengths.sum():
            move16 = np.concatenate([m for m, _ in candidates])
            probs = np.concatenate([p for _, p in candidates])
            rows = np.repeat(np.arange(len(idx)), lengths)
            labels = labels_from_move16(move16, hcp_turns(hcps)[rows])
            ok = labels >= 0
            np.add.at(out.policy, (lo + rows[ok], labels[ok]), probs[ok])
        out.result[lo:hi] = result
        out.value[lo:hi] = value


class Corpus:
    """Several sources seen as one index space (global index = offset of its source + local index)."""

    def __init__(self, sources: Sequence[Source], planes2: int) -> None:
        if not sources:
            raise UserError("no training records given")
        self.sources = list(sources)
        self.planes2 = planes2
        self.offsets = np.cumsum([0] + [len(s) for s in self.sources])
        self._board: cshogi.Board | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_board": None}

    def gather(self, indices: np.ndarray) -> Batch:
        """The batch of the given global indices, in sorted order (sorted reads are sequential-ish)."""
        if self._board is None:
            ensure_features2(self.planes2)  # cshogi's switch is per process: set it in each worker
            self._board = cshogi.Board()
        idx = np.sort(np.asarray(indices, np.int64))
        out = alloc_batch(len(idx), self.planes2)
        bounds = np.searchsorted(idx, self.offsets)
        for k, source in enumerate(self.sources):
            a, b = bounds[k], bounds[k + 1]
            if a < b:
                source.gather(idx[a:b] - self.offsets[k], out, int(a), self._board)
        return out


class BatchDataset(Dataset):
    """A batch-level Dataset: item = (indices, mirror seed) from a sampler, value = a whole Batch."""

    def __init__(self, corpus: Corpus, mirror: float = 0.0) -> None:
        self.corpus = corpus
        self.mirror = mirror

    def __len__(self) -> int:
        return len(self.corpus)

    def __getitem__(self, item: tuple[np.ndarray, tuple[int, ...]]) -> Batch:
        indices, key = item
        batch = self.corpus.gather(indices)
        if self.mirror > 0:
            rng = np.random.default_rng(key)
            mirror_batch(batch, np.flatnonzero(rng.random(len(batch.result)) < self.mirror))
        # Feature planes are 0/1: as uint8 they cost a quarter to pass between processes and to the GPU.
        return batch._replace(x1=batch.x1.astype(np.uint8), x2=batch.x2.astype(np.uint8))


class EpochBatches(Sampler):
    """Shuffled training batches: the permutation comes from (seed, epoch), so any batch can be found
    again on resume. Each global batch is split into world x accum equal chunks; this rank yields its
    `accum` chunks per batch, so 2 ranks x 1 chunk see the same data as 1 rank x 2 accumulated chunks."""

    def __init__(
        self, n: int, batch_size: int, seed: int, rank: int = 0, world: int = 1, accum: int = 1
    ) -> None:
        if batch_size % (world * accum):
            raise UserError(
                f"--batch-size {batch_size} must be divisible by processes x --accum-steps ({world * accum})"
            )
        if n < batch_size:
            raise UserError(
                f"the training data has {n} positions, fewer than one batch ({batch_size}): "
                f"give a smaller --batch-size, or leave it out to fit the data"
            )
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.rank, self.world, self.accum = rank, world, accum
        self.epoch, self.start = 0, 0

    @property
    def batches_per_epoch(self) -> int:
        return self.n // self.batch_size

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Next iteration yields this epoch's batches from batch `start` on."""
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        return (self.batches_per_epoch - self.start) * self.accum

    def __iter__(self) -> Iterator[tuple[np.ndarray, tuple[int, ...]]]:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        parts = self.world * self.accum
        for b in range(self.start, self.batches_per_epoch):
            chunks = np.split(perm[b * self.batch_size : (b + 1) * self.batch_size], parts)
            for j in range(self.accum):
                c = self.rank * self.accum + j
                yield np.sort(chunks[c]), (self.seed, self.epoch, b, c)


class SequentialBatches(Sampler):
    """The first `limit` positions in order, in batches (the last one may be short): evaluation."""

    def __init__(self, n: int, batch_size: int, limit: int | None = None) -> None:
        self.n = n if limit is None else min(n, limit)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, tuple[int, ...]]]:
        for a in range(0, self.n, self.batch_size):
            yield np.arange(a, min(a + self.batch_size, self.n)), (a,)


def _worker_init(_: int) -> None:
    """Workers leave Ctrl-C to the main process, which checkpoints and then shuts them down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_loader(dataset: BatchDataset, sampler: Sampler, workers: int, pin_memory: bool) -> DataLoader:
    return DataLoader(
        dataset,
        sampler=sampler,
        batch_size=None,
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        worker_init_fn=_worker_init if workers > 0 else None,
    )


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Move a loader batch to `device`, features back to float32 there."""
    b = Batch(*(t.to(device, non_blocking=True) for t in batch))
    return b._replace(x1=b.x1.float(), x2=b.x2.float())


# ---------------------------------------------------------------------------------------------------
# Finding and opening inputs.


def newest_files(folder: Path, count: int | None) -> list[Path]:
    """Record files directly in `folder`, oldest first by (mtime, name); the newest `count` if given."""
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in RECORD_SUFFIXES]
    files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name))
    if not files:
        raise UserError(f"{folder}: no record files ({', '.join(RECORD_SUFFIXES)}) in this folder")
    names = {p.name for p in files}
    if (folder / CORPUS_SETTINGS).is_file() and {"corpus.hcpe", "corpus.hcpe3"} <= names:
        # bin/corpus writes each game to both: reading the folder would count every position twice
        raise UserError(
            f"{folder}: a bin/corpus folder, whose corpus.hcpe and corpus.hcpe3 hold the same games; "
            f"give one of the two files, not the folder"
        )
    return files[-count:] if count else files


def resolve_inputs(paths: Sequence[str | os.PathLike], num_files: int | None = None) -> list[Path]:
    """Files as given, and each folder's (newest `num_files`) record files."""
    if num_files is not None and num_files < 1:
        raise UserError(f"--num-files must be >= 1, got {num_files}")
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(newest_files(p, num_files))
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    return files


def cache_key(files: Sequence[Path], average: bool, temperature: float) -> str:
    """Identifies an hcpe3 cache by its inputs (path, size, mtime) and build options."""
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    text = json.dumps({"files": stamp, "average": average, "temperature": temperature})
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def hcpe3_cache_for(
    files: Sequence[Path],
    cache_dir: Path,
    average: bool = False,
    temperature: float = 1.0,
    log=print,
    progress: bool = True,
) -> Path:
    """The cache built from these hcpe3 files, reused if one with the same key is already there."""
    path = cache_dir / f"hcpe3-{cache_key(files, average, temperature)}.cache"
    if path.is_file():
        log(f"reusing hcpe3 cache {path}")
        return path
    log(f"building hcpe3 cache {path} from {len(files)} file(s)")
    stats = build_hcpe3_cache(files, path, average, temperature, progress=progress)
    log(f"hcpe3 cache: {stats.entries} positions ({stats.merged} merged, {stats.no_candidates} no policy)")
    return path


def plan_sources(files: Sequence[Path]) -> tuple[list[tuple[str, Path]], list[Path]]:
    """(format, file) for directly readable files, and the hcpe3 files that need a cache; an empty or
    damaged file is skipped with a warning (usable_files)."""
    direct, hcpe3 = [], []
    for p, fmt in usable_files(files, detect_format, "record").items():
        (hcpe3 if fmt == "hcpe3" else direct).append((fmt, p))
    return direct, [p for _, p in hcpe3]


SOURCE_TYPES: dict[str, type[Source]] = {"hcpe": HcpeSource, "data": DataSource, "cache": CacheSource}


def open_corpus(direct: Sequence[tuple[str, Path]], caches: Sequence[Path], planes2: int) -> Corpus:
    sources = [SOURCE_TYPES[fmt](p) for fmt, p in direct] + [CacheSource(p) for p in caches]
    sources = [s for s in sources if len(s)]
    return Corpus(sources, planes2)
