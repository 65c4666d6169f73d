"""A training run in phases (setup, epoch loop, evaluation, checkpoints, finish), with exact resume and DDP.

Everything that decides the result is a function of the saved state: data order comes from
(seed, epoch) and the batch index, mirror flips from (seed, epoch, batch, chunk), so a run stopped
at any step and resumed reaches the same weights as one that never stopped. Under torchrun each rank
takes its chunks of every global batch and DDP averages gradients; losses are normalised by global
counts, so N ranks x B/N positions compute the same gradient as 1 rank accumulating N chunks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from engine.core.features import FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM, ensure_features2
from engine.core.network import (
    PolicyValueNetwork,
    build,
    load_model,
    network_from_payload,
    preset,
    read_checkpoint,
    save_checkpoint,
)
from engine.errors import UserError
from engine.fileio import check_output_dir, removed_if_refused
from train.data.dataset import Batch, Corpus, EpochBatches, plan_sources, resolve_inputs, to_device
from train.trainer.config import TrainConfig, network_overrides, resumed_config, validate
from train.trainer.distributed import (
    Dist,
    StopFlag,
    all_sum,
    amp_dtype,
    init_distributed,
    log_main,
    pick_device,
)
from train.trainer.evaluation import evaluate
from train.trainer.metrics import MetricsLog
from train.trainer.optimization import make_optimization, train_step
from train.trainer.training_data import open_training_data


def make_network(cfg: TrainConfig, log: Callable[[str], None]) -> PolicyValueNetwork:
    planes2 = FEATURES2_NYUGYOKU_NUM if cfg.nyugyoku_features else FEATURES2_NUM
    if cfg.init:
        net = load_model(cfg.init, cfg.activation)
        log(f"initial weights from {cfg.init} ({net.config})")
        return net.train()
    act = {"activation": cfg.activation} if cfg.activation else {}
    config = preset(cfg.network, input2=planes2, **act, **network_overrides(cfg))
    return build(config, seed=cfg.seed).train()


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Run:
    """What the phases of `train` share: the run's settings and parts, and how far it has got."""

    cfg: TrainConfig
    d: Dist
    log: Callable[[str], None]
    run_dir: Path
    files: list[Path]
    device: torch.device
    dtype: torch.dtype | None
    net: PolicyValueNetwork
    model: nn.Module  # net, or its DDP wrapper
    corpus: Corpus
    sampler: EpochBatches
    loader: Iterable[Batch]
    test_loader: Iterable[Batch] | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    ema: AveragedModel | None
    metrics: MetricsLog
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    last_train: dict[str, float] = field(default_factory=dict)
    last_test: dict[str, float] = field(default_factory=dict)

    @property
    def ckpt_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.batches_per_epoch

    def saved_net(self) -> PolicyValueNetwork:
        """The weights a checkpoint's model and the test measure: the EMA ones when --ema is on."""
        return self.ema.module if self.ema is not None else self.net


def train(config: TrainConfig) -> dict[str, Any]:
    """Train as configured; returns a summary (steps, last losses, last test metrics, paths). A run
    refused during setup leaves no run folder behind."""
    with removed_if_refused(config.out), removed_if_refused(config.cache_dir or Path(config.out) / "cache"):
        run = _setup(config)
    started = time.perf_counter()
    stopped_by = _epoch_loop(run)
    return _finish(run, stopped_by, started)


def _run_config(
    config: TrainConfig, run_dir: Path, log: Callable[[str], None]
) -> tuple[TrainConfig, list[Path], dict[str, Any] | None]:
    """The settings and data files of this run: on --resume the saved ones (and the checkpoint read)."""
    ckpt_path = run_dir / "checkpoint.pt"
    if not config.resume:
        if ckpt_path.exists():
            raise UserError(f"{run_dir} already holds a run (checkpoint.pt): pass --resume or another --out")
        return config, resolve_inputs(config.data, config.num_files), None
    payload = read_checkpoint(ckpt_path)
    cfg = resumed_config(config, payload, log)
    files = [Path(p) for p in payload.get("files", [])]
    missing = [p for p in files if not p.is_file()]
    if missing:
        raise UserError(f"{missing[0]}: a data file of this run is missing; cannot resume exactly")
    return cfg, files, payload


def _setup(config: TrainConfig) -> Run:
    """Checks the settings, opens the data, builds the network and its optimizer, and restores the state
    of a resumed run."""
    validate(config)
    run_dir = check_output_dir(config.out, "--out")  # created once the inputs are known to be good
    d = init_distributed(config.device)
    log = log_main(d)
    cfg, files, payload = _run_config(config, run_dir, log)
    validate(cfg)
    if cfg.test and d.main:
        plan_sources(resolve_inputs(cfg.test))  # a bad --test is refused before any cache is built
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
    device = pick_device(cfg.device, d)
    dtype = amp_dtype(cfg.amp, device)
    net = make_network(cfg, log)
    if payload is not None:
        net = network_from_payload(payload, run_dir / "checkpoint.pt").train()
    ensure_features2(net.config.input2)
    pin = device.type == "cuda"
    cfg, corpus, sampler, loader, test_loader = open_training_data(
        cfg, files, run_dir, net.config.input2, d, pin, log
    )
    net.to(device)
    model: nn.Module = net
    if d.enabled:
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if pin else None)
    optimizer, scheduler, scaler, ema = make_optimization(net, cfg, sampler.batches_per_epoch, device, dtype)
    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    metrics = MetricsLog(run_dir, d.main, cfg.tensorboard, cfg.plot_interval)
    run = Run(
        cfg=cfg,
        d=d,
        log=log,
        run_dir=run_dir,
        files=files,
        device=device,
        dtype=dtype,
        net=net,
        model=model,
        corpus=corpus,
        sampler=sampler,
        loader=loader,
        test_loader=test_loader,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        ema=ema,
        metrics=metrics,
    )
    if payload is not None:
        _restore(run, payload)
    if d.main:
        log(
            f"training on {len(corpus)} positions from {len(files)} file(s), {run.steps_per_epoch} "
            f"steps/epoch, {cfg.epochs} epoch(s), device {device}, {d.world} process(es)"
        )
    return run


def _restore(run: Run, payload: dict[str, Any]) -> None:
    """A resumed run's optimizer, schedule, scaler, EMA, RNG and position from its checkpoint; the metrics
    logged after that checkpoint are dropped (the resumed run logs them again)."""
    run.optimizer.load_state_dict(payload["optimizer"])
    run.scheduler.load_state_dict(payload["scheduler"])
    run.scaler.load_state_dict(payload["scaler"])
    if run.ema is not None:
        run.ema.load_state_dict(payload["ema"])
    set_rng_state(payload["rng"])
    run.step, run.epoch, run.batch_in_epoch = (
        int(payload["step"]),
        int(payload["epoch"]),
        int(payload["batch"]),
    )
    run.log(f"resuming {run.run_dir} at step {run.step} (epoch {run.epoch + 1}, batch {run.batch_in_epoch})")
    run.metrics.drop_after(run.step)


def _epoch_loop(run: Run) -> str | None:
    """Optimizer steps until the last epoch ends or the ranks agree to stop; returns why it stopped
    (None: all epochs done). Logs, evaluates and checkpoints on the configured steps."""
    cfg = run.cfg
    acc = torch.zeros(4, dtype=torch.float64, device=run.device)  # policy loss, policy rows, value loss, rows
    interval_start, interval_steps = time.perf_counter(), 0
    session_steps = 0
    bar = tqdm(
        total=cfg.epochs * run.steps_per_epoch * cfg.batch_size,
        initial=run.step * cfg.batch_size,
        unit="pos",
        unit_scale=True,
        dynamic_ncols=True,
        disable=not (run.d.main and cfg.progress),
    )
    stopped_by: str | None = None
    with StopFlag() as stop, bar:
        while run.epoch < cfg.epochs and stopped_by is None:
            run.sampler.set_epoch(run.epoch, run.batch_in_epoch)
            batches = iter(run.loader)
            while run.batch_in_epoch < run.steps_per_epoch:
                micro = [to_device(next(batches), run.device) for _ in range(cfg.accum_steps)]
                acc += train_step(
                    run.model, micro, run.optimizer, run.scaler, cfg, run.d, run.dtype, run.device
                )
                run.scheduler.step()
                if run.ema is not None:
                    run.ema.update_parameters(run.net)
                run.step += 1
                run.batch_in_epoch += 1
                session_steps += 1
                interval_steps += 1
                bar.update(cfg.batch_size)
                if run.step % cfg.log_interval == 0 or run.batch_in_epoch == run.steps_per_epoch:
                    interval_start = _log_train(run, acc, interval_start, interval_steps, bar)
                    interval_steps = 0
                if run.batch_in_epoch == run.steps_per_epoch:
                    _end_epoch(run)
                    break
                if cfg.eval_interval and run.step % cfg.eval_interval == 0:
                    _run_eval(run)
                if run.step % cfg.checkpoint_interval == 0:
                    _save(run, run.ckpt_path)
                stopped_by = _should_stop(stop, session_steps, cfg, run.d, run.device)
                if stopped_by:
                    _save(run, run.ckpt_path)
                    break
            del batches
    return stopped_by


def _log_train(run: Run, acc: torch.Tensor, interval_start: float, interval_steps: int, bar: tqdm) -> float:
    """One metrics row of the training losses summed in `acc` (over all ranks, then reset) and the rate
    since `interval_start`; returns the time it was taken (the next interval's start)."""
    cfg = run.cfg
    totals = all_sum(acc.clone(), run.d).tolist()
    acc.zero_()
    now = time.perf_counter()
    run.last_train = {
        "policy_loss": totals[0] / max(totals[1], 1),
        "value_loss": totals[2] / max(totals[3], 1),
    }
    run.last_train["loss"] = run.last_train["policy_loss"] + run.last_train["value_loss"]
    rate = interval_steps * cfg.batch_size / max(now - interval_start, 1e-9)
    run.metrics.write(
        {
            "step": run.step,
            "epoch": run.epoch + run.batch_in_epoch / run.steps_per_epoch,
            "samples": run.step * cfg.batch_size,
            "lr": run.optimizer.param_groups[0]["lr"],
            **run.last_train,
            "samples_per_s": rate,
        }
    )
    bar.set_postfix(loss=f"{run.last_train['loss']:.4f}", lr=f"{run.optimizer.param_groups[0]['lr']:.3g}")
    return now


def _end_epoch(run: Run) -> None:
    """An epoch is done: evaluate, checkpoint, and keep an epoch copy with --save-epochs."""
    run.epoch, run.batch_in_epoch = run.epoch + 1, 0
    _run_eval(run)
    _save(run, run.ckpt_path)
    if run.cfg.save_epochs:
        _save(run, run.run_dir / f"checkpoint-epoch{run.epoch}.pt")


def _run_eval(run: Run) -> None:
    """The test losses and accuracies of the saved weights, logged and plotted (with --test only)."""
    if run.test_loader is None:
        return
    run.last_test = evaluate(run.saved_net(), run.test_loader, run.device, run.dtype)
    run.metrics.write({"step": run.step, "epoch": run.epoch, **run.last_test}, plot=True)
    t = run.last_test
    run.log(
        f"step {run.step}: test policy acc {t['test_policy_acc']:.4f} "
        f"value acc {t['test_value_acc']:.4f} policy loss {t['test_policy_loss']:.4f} "
        f"value loss {t['test_value_loss']:.4f}"
    )


def _save(run: Run, path: Path) -> None:
    """Everything an exact resume needs (rank 0 writes it)."""
    if not run.d.main:
        return
    save_checkpoint(
        path,
        run.net,
        optimizer=run.optimizer.state_dict(),
        scaler=run.scaler.state_dict(),
        scheduler=run.scheduler.state_dict(),
        ema=run.ema.state_dict() if run.ema is not None else None,
        step=run.step,
        epoch=run.epoch,
        batch=run.batch_in_epoch,
        rng=rng_state(),
        train_config=dataclasses.asdict(run.cfg),
        files=[str(p) for p in run.files],
    )


def _finish(run: Run, stopped_by: str | None, started: float) -> dict[str, Any]:
    """model.pt when all epochs are done, the last plot, and the summary `train` returns."""
    finished = run.epoch >= run.cfg.epochs
    model_path = run.run_dir / "model.pt"
    if finished and run.d.main:
        save_checkpoint(model_path, run.saved_net(), step=run.step, train_config=dataclasses.asdict(run.cfg))
        run.log(f"saved {model_path}")
    if stopped_by and run.d.main:
        run.log(f"stopped ({stopped_by}) at step {run.step}; checkpoint saved, continue with --resume")
    run.metrics.plot()
    run.metrics.close()
    if run.d.enabled:
        dist.barrier()
    return {
        "steps": run.step,
        "epochs_done": run.epoch,
        "finished": finished,
        "stopped_by": stopped_by,
        "positions": len(run.corpus),
        "processes": run.d.world,
        "steps_per_epoch": run.steps_per_epoch,
        "seconds": time.perf_counter() - started,
        **run.last_train,
        **run.last_test,
        "checkpoint": str(run.ckpt_path),
        "model": str(model_path) if finished else None,
    }


def _should_stop(
    stop: StopFlag, session_steps: int, cfg: TrainConfig, d: Dist, device: torch.device
) -> str | None:
    """Why to stop now, agreed by all ranks (a signal may reach only some of them)."""
    reason = 0
    if stop.signum is not None:
        reason = 1
    elif cfg.stop_after_steps is not None and session_steps >= cfg.stop_after_steps:
        reason = 2
    if d.enabled:
        t = torch.tensor([reason], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        reason = int(t.item())
    return {0: None, 1: "signal", 2: "--stop-after-steps"}[reason]
