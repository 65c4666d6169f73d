"""A training run's data: the corpus of its files (an hcpe3 cache built once, by rank 0), this rank's
batch loader and the --test loader."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

import torch.distributed as dist

from train.data.dataset import (
    Batch,
    BatchDataset,
    Corpus,
    EpochBatches,
    hcpe3_cache_for,
    make_loader,
    open_corpus,
    plan_sources,
)
from train.trainer.config import DEFAULT_BATCH, TrainConfig, auto_batch_size
from train.trainer.distributed import Dist
from train.trainer.evaluation import make_test_loader


def open_training_data(
    cfg: TrainConfig,
    files: list[Path],
    run_dir: Path,
    planes2: int,
    d: Dist,
    pin: bool,
    log: Callable[[str], None],
) -> tuple[TrainConfig, Corpus, EpochBatches, Iterable[Batch], Iterable[Batch] | None]:
    """The settings with the batch size decided (auto_batch_size when not given), the training corpus, its
    sampler and loader (this rank's part of every batch), and on rank 0 the --test loader."""
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else run_dir / "cache"
    direct, caches = _prepare_sources(files, cache_dir, cfg, d, log)
    corpus = open_corpus(direct, caches, planes2)
    if cfg.batch_size is None:
        cfg = dataclasses.replace(cfg, batch_size=auto_batch_size(len(corpus), d.world * cfg.accum_steps))
        if len(corpus) < DEFAULT_BATCH and d.main:
            log(
                f"batch size {cfg.batch_size}: the data's {len(corpus)} positions are fewer than one default "
                f"batch ({DEFAULT_BATCH}); --batch-size sets it"
            )
    test_loader = None
    if cfg.test and d.main:
        test_batch = max(1, cfg.batch_size // cfg.accum_steps)
        test_loader = make_test_loader(
            cfg.test, cache_dir, planes2, test_batch, cfg.test_limit, min(cfg.workers, 2), pin, log
        )
    sampler = EpochBatches(len(corpus), cfg.batch_size, cfg.seed, d.rank, d.world, cfg.accum_steps)
    return (
        cfg,
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
