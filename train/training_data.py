"""A training run's data: the corpus of its files (an hcpe3 cache built once, by rank 0), this rank's
batch loader and the --test loader."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch.distributed as dist

from train.config import TrainConfig
from train.dataset import (
    Batch,
    BatchDataset,
    Corpus,
    EpochBatches,
    hcpe3_cache_for,
    make_loader,
    open_corpus,
    plan_sources,
)
from train.distributed import Dist
from train.evaluation import make_test_loader


def open_training_data(
    cfg: TrainConfig,
    files: list[Path],
    run_dir: Path,
    planes2: int,
    d: Dist,
    pin: bool,
    log: Callable[[str], None],
) -> tuple[Corpus, EpochBatches, Iterable[Batch], Iterable[Batch] | None]:
    """The training corpus, its sampler and loader (this rank's part of every batch), and on rank 0 the
    --test loader."""
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else run_dir / "cache"
    direct, caches = _prepare_sources(files, cache_dir, cfg, d, log)
    corpus = open_corpus(direct, caches, planes2)
    test_loader = None
    if cfg.test and d.main:
        test_batch = max(1, cfg.batch_size // cfg.accum_steps)
        test_loader = make_test_loader(
            cfg.test, cache_dir, planes2, test_batch, cfg.test_limit, min(cfg.workers, 2), pin, log
        )
    sampler = EpochBatches(len(corpus), cfg.batch_size, cfg.seed, d.rank, d.world, cfg.accum_steps)
    return (
        corpus,
        sampler,
        make_loader(BatchDataset(corpus, cfg.mirror), sampler, cfg.workers, pin),
        test_loader,
    )


def _prepare_sources(
    files: list[Path], cache_dir: Path, cfg: TrainConfig, d: Dist, log: Callable[[str], None]
) -> tuple[list[tuple[str, Path]], list[Path]]:
    """Detect formats; rank 0 builds the hcpe3 cache (if any) while the other ranks wait."""
    direct, hcpe3 = plan_sources(files)
    if not hcpe3:
        return direct, []

    def cache() -> list[Path]:
        options = (cfg.hcpe3_average, cfg.hcpe3_temperature, log, cfg.progress)
        return [hcpe3_cache_for(hcpe3, cache_dir, *options)]

    caches = cache() if d.main else []
    if d.enabled:
        dist.barrier()
    return direct, caches if d.main else cache()
