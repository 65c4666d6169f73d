"""dlshogi's hcpe3 cache: hcpe3 games replayed into random-access training entries, and their reader.

Layout: u64 num, u64 offset[num], then per position CACHE_BODY + CACHE_CANDIDATE[k].
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cshogi
import numpy as np
from tqdm import tqdm

from engine.core.rules import BLACK_WIN, DRAW, RESULT_MASK
from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.fileio import atomic_write
from engine.records.formats import PathLike
from engine.records.hcpe3_games import check_hcpe3, existing_file, warn_truncated
from train.data.readers import check_positions, iter_hcpe3_positions, sample_indices, usable_files

CACHE_BODY = np.dtype([("hcp", "u1", 32), ("value", "<f4"), ("result", "<f4"), ("count", "<i4")])
# dlshogi's `struct Hcpe3CacheCandidate {u16 move16; float prob;}` is not packed: the compiler pads it to 8
# bytes, so its cache files carry 2 padding bytes per candidate. We match the real files, not a packed 6.
CACHE_CANDIDATE = np.dtype(
    {"names": ["move16", "prob"], "formats": ["<u2", "<f4"], "offsets": [0, 4], "itemsize": 8}
)
assert (CACHE_BODY.itemsize, CACHE_CANDIDATE.itemsize) == (44, 8)


@dataclass
class CacheStats:
    """What build_hcpe3_cache did."""

    positions: int = 0  # positions read from the inputs
    entries: int = 0  # entries written
    no_candidates: int = 0  # positions whose move carried no policy target
    merged: int = 0  # duplicates folded into an earlier entry (average=True)


def visits_to_probs(visits: np.ndarray, temperature: float) -> np.ndarray:
    """Policy target from visit counts: T=1 proportional, T=0 one-hot on the most visited, else v^(1/T)."""
    v = np.asarray(visits, np.float64)
    if temperature == 0:
        probs = np.zeros_like(v)
        probs[np.argmax(v)] = 1.0
        return probs.astype(np.float32)
    if temperature != 1:
        v = (v / v.max()) ** (1.0 / temperature)
    return (v / v.sum()).astype(np.float32)


def hcp_turn(hcp: np.ndarray) -> int:
    """Side to move (cshogi.BLACK/WHITE) of an hcp: its first bit."""
    return int(hcp[0]) & 1


def result_for_turn(result: int, turn: int) -> float:
    """Game result from the side to move's view: 1 won, 0 lost, 0.5 draw."""
    game = result & RESULT_MASK
    if game == DRAW:
        return 0.5
    return 1.0 if (game == BLACK_WIN) == (turn == cshogi.BLACK) else 0.0


def encode_cache_entry(
    hcp: bytes, value: float, result: float, count: int, move16s: np.ndarray, probs: np.ndarray
) -> bytes:
    """One entry: value, result and probs are sums over `count` merged positions."""
    cands = np.zeros(len(move16s), CACHE_CANDIDATE)  # zeroed padding: reproducible bytes
    cands["move16"] = move16s
    cands["prob"] = probs
    return struct.pack("<32sffi", hcp, value, result, count) + cands.tobytes()


def write_cache(out_path: PathLike, entries: Iterable[bytes]) -> int:
    """Spool the entries to a temp file to learn the offsets, then write header + entries atomically."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    sizes: list[int] = []
    with tempfile.TemporaryFile(dir=out.parent) as spool:
        for body in entries:
            spool.write(body)
            sizes.append(len(body))
        n = len(sizes)
        offsets = 8 + 8 * n + np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64)]) if n else []
        spool.seek(0)
        with atomic_write(out, "wb") as f:
            f.write(struct.pack("<Q", n))
            f.write(np.asarray(offsets, "<u8").tobytes())
            shutil.copyfileobj(spool, f, 1 << 20)
    return n


def _as_paths(inputs: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(inputs, str | os.PathLike):
        return [Path(inputs)]
    return [Path(p) for p in inputs]


def build_hcpe3_cache(
    inputs: PathLike | Iterable[PathLike],
    out_path: PathLike,
    average: bool = False,
    temperature: float = 1.0,
    skip_no_candidates: bool = True,
    progress: bool = False,
) -> CacheStats:
    """Replay hcpe3 files into dlshogi's random-access cache (value = winrate of eval, result and policy
    from the side to move). Moves with no candidates carry no policy target: skipped, as dlshogi does,
    or kept with an empty policy. average=True merges duplicate positions (sums + count)."""
    if temperature < 0:
        raise UserError(f"temperature must be >= 0, got {temperature}")
    paths = usable_files(_as_paths(inputs), check_hcpe3, "hcpe3")
    stats = CacheStats()

    def targets() -> Iterator[tuple[bytes, float, float, np.ndarray, np.ndarray]]:
        bar = tqdm(desc="positions", unit="pos", disable=not progress)
        with bar:
            for p in paths:
                for pos in iter_hcpe3_positions(p):
                    bar.update()
                    stats.positions += 1
                    visits = pos.candidates["visitNum"]
                    if len(visits) == 0 or not visits.any():
                        stats.no_candidates += 1
                        if skip_no_candidates:
                            continue
                        move16s, probs = np.empty(0, np.uint16), np.empty(0, np.float32)
                    else:
                        move16s, probs = pos.candidates["move16"], visits_to_probs(visits, temperature)
                    value = float(eval_to_value(pos.eval))
                    result = result_for_turn(pos.result, hcp_turn(pos.hcp))
                    yield pos.hcp.tobytes(), value, result, move16s, probs

    def plain() -> Iterator[bytes]:
        for hcp, value, result, move16s, probs in targets():
            yield encode_cache_entry(hcp, value, result, 1, move16s, probs)

    def averaged() -> Iterator[bytes]:
        merged: dict[bytes, list] = {}
        for hcp, value, result, move16s, probs in targets():
            entry = merged.get(hcp)
            if entry is None:
                merged[hcp] = [value, result, 1, dict(zip(move16s.tolist(), probs.tolist(), strict=True))]
                continue
            stats.merged += 1
            entry[0] += value
            entry[1] += result
            entry[2] += 1
            policy = entry[3]
            for m, pr in zip(move16s.tolist(), probs.tolist(), strict=True):
                policy[m] = policy.get(m, 0.0) + pr
        for hcp, (value, result, count, policy) in merged.items():
            move16s = np.fromiter(policy.keys(), np.uint16, len(policy))
            probs = np.fromiter(policy.values(), np.float32, len(policy))
            yield encode_cache_entry(hcp, value, result, count, move16s, probs)

    stats.entries = write_cache(out_path, averaged() if average else plain())
    return stats


class Hcpe3Cache:
    """Random access to an hcpe3 cache (memory-mapped); values are returned already divided by count."""

    def __init__(self, path: PathLike):
        p = existing_file(path)
        self.path = p
        size = p.stat().st_size
        mm = np.memmap(p, dtype=np.uint8, mode="r")
        num = int(mm[:8].view("<u8")[0]) if size >= 8 else 0
        header_end = 8 + 8 * num
        if size < 8 or header_end > size:
            raise UserError(f"{p}: not an hcpe3 cache (its header does not fit in {size} bytes)")
        starts = mm[8:header_end].view("<u8").astype(np.int64)
        steps = np.diff(starts)
        body = CACHE_BODY.itemsize
        if num and (
            starts[0] != header_end
            or np.any(steps < body)
            or np.any((steps - body) % CACHE_CANDIDATE.itemsize)
        ):
            raise UserError(f"{p}: not an hcpe3 cache (entry offsets out of range)")
        if not num and size != 8:
            raise UserError(f"{p}: not an hcpe3 cache (no entries but {size - 8} bytes after the header)")
        # Entries before the first one that runs past the end of the file are whole; the last entry's
        # length comes from the file size, so it is whole only if its candidates fill that exactly.
        whole = int(np.searchsorted(starts[1:], size, side="right"))
        tail = size - int(starts[-1]) - body if num else -1
        if whole == num - 1 and tail >= 0 and tail % CACHE_CANDIDATE.itemsize == 0:
            whole = num
        if whole < num:
            warn_truncated(p, int(starts[whole]), "final cache entry")
        self._mm = mm
        self._starts = starts[:whole]
        self._ends = np.append(starts[1:], size)[:whole]
        if whole:
            if np.any(self._bodies(sample_indices(whole))["count"] < 1):
                raise UserError(f"{p}: not an hcpe3 cache (an entry has count < 1)")
            check_positions(p, whole, lambda a, b: self._bodies(np.arange(a, b))["hcp"], "hcpe3 cache")

    def __len__(self) -> int:
        return len(self._starts)

    def __reduce__(self) -> tuple:
        return (Hcpe3Cache, (self.path,))  # reopen in DataLoader workers instead of pickling the map

    def _bodies(self, idx: np.ndarray) -> np.ndarray:
        raw = self._mm[self._starts[idx][:, None] + np.arange(CACHE_BODY.itemsize)]
        return np.ascontiguousarray(raw).view(CACHE_BODY).reshape(-1)

    def entry(self, i: int) -> tuple[np.ndarray, float, float, np.ndarray, np.ndarray]:
        """(hcp, value, result, move16s, probs) of entry i."""
        hcps, value, result, cands = self.gather(np.array([i]))
        return hcps[0], float(value[0]), float(result[0]), cands[0][0], cands[0][1]

    def gather(
        self, indices: np.ndarray | Iterable[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """Batched read: hcps [B,32] u1, value [B] f32, result [B] f32, per entry (move16s, probs)."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"cache index out of range (size {n})")
        idx %= max(n, 1)
        bodies = self._bodies(idx)
        count = bodies["count"].astype(np.float32)
        value = bodies["value"] / count
        result = bodies["result"] / count
        starts = self._starts[idx] + CACHE_BODY.itemsize
        lengths = (self._ends[idx] - starts) // CACHE_CANDIDATE.itemsize
        nbytes = lengths * CACHE_CANDIDATE.itemsize
        first = np.cumsum(nbytes) - nbytes
        byte_idx = np.repeat(starts - first, nbytes) + np.arange(int(nbytes.sum()))
        cands = np.ascontiguousarray(self._mm[byte_idx]).view(CACHE_CANDIDATE)
        probs = cands["prob"] / np.repeat(count, lengths)
        splits = np.cumsum(lengths)[:-1]
        pairs = list(zip(np.split(cands["move16"], splits), np.split(probs, splits), strict=True))
        return bodies["hcp"].copy(), value, result, pairs
