"""The inference servers of a multi-process self-play run: none, one, or one per device (`--devices`),
and which worker process feeds which.

A GPU's inference server batches the rows of every search process it serves; with several GPUs in one
host each gets its own server (its own engine build and context) and the workers are dealt to the
servers in turn (worker i feeds device i mod D), as dlshogi runs one process per GPU. The servers start
side by side, so several TensorRT builds (one per GPU model, the cache keyed by name and compute
capability) and model loads overlap.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing as mp
import os
from collections.abc import Sequence
from pathlib import Path

from engine.backends.evaluator import Evaluator
from engine.backends.inference_server import Endpoint, InferenceServer, ServerStats
from engine.errors import UserError
from engine.selfplay.config import EvaluatorFactory, SelfPlayConfig
from engine.selfplay.runner import group_sizes, leaf_rows, make_evaluator


def _server_evaluator(config: SelfPlayConfig, max_batch: int) -> Evaluator:
    """The inference server's evaluator: the configured model, with every CPU thread (it is the only one)."""
    return make_evaluator(config, max_batch=max_batch, threads=config.threads or os.cpu_count() or 1)


def _gpu_backend(config: SelfPlayConfig) -> bool:
    """Whether the configured evaluator would run on a GPU, decided without building it."""
    from engine.backends.choose import choose_backend, default_model_path, model_kind, probe_platform

    path = Path(config.model) if config.model else default_model_path()
    try:
        choice = choose_backend(config.backend, model_kind(path), probe_platform(config.device))
    except UserError:
        return False  # building the evaluator reports it
    return choice.device == "cuda"


def server_factories(config: SelfPlayConfig, shared: EvaluatorFactory | None) -> list[EvaluatorFactory]:
    """One evaluator factory per inference server, or none to run without a server. `shared` (tests,
    benchmarks: a latency model standing in for a device) is built once per device."""
    devices = config.devices or [config.device]
    if shared is not None:
        return [shared] * len(devices)
    if config.devices or (
        config.inference_server == "on"
        or (config.inference_server == "auto" and config.processes > 1 and _gpu_backend(config))
    ):
        return [
            functools.partial(_server_evaluator, dataclasses.replace(config, device=d, devices=[]))
            for d in devices
        ]
    return []


def device_label(config: SelfPlayConfig, server: int) -> str:
    """The name a server's figures are shown under."""
    if config.devices:
        device = config.devices[server]
        return f"{device}#{server}" if config.devices.count(device) > 1 else device
    return config.device or "server"


class Servers:
    """The run's inference servers and the endpoints each worker gets (None: it builds its own
    evaluator)."""

    def __init__(
        self,
        config: SelfPlayConfig,
        parts: Sequence[Sequence[int]],
        factories: list[EvaluatorFactory],
        ctx: mp.context.BaseContext,
    ) -> None:
        self.config = config
        self.parts = parts
        self.servers: list[InferenceServer] = []
        self.owner = [i % len(factories) for i in range(len(parts))] if factories else []
        rows = max((leaf_rows(config, len(r)) for r in parts), default=1)
        for s, factory in enumerate(factories):
            mine = [i for i, owner in enumerate(self.owner) if owner == s]
            if not mine:
                continue
            clients = sum(len(group_sizes(config, len(parts[i]))) for i in mine)  # a client per group
            batch = rows * len(mine)  # room for one full batch of every worker it serves in one call
            self.servers.append(InferenceServer(functools.partial(factory, batch), clients, rows, ctx=ctx))

    def start(self) -> list[list[Endpoint] | None]:
        """Start every server (their builds overlap), then hand each worker its endpoints."""
        if not self.servers:
            return [None] * len(self.parts)
        for server in self.servers:
            server.launch()
        try:
            flats = [server.wait_ready() for server in self.servers]
        except BaseException:
            self.close()
            raise
        endpoints: list[list[Endpoint] | None] = []
        taken = [0] * len(self.servers)
        for i, part in enumerate(self.parts):
            s, groups = self.owner[i], len(group_sizes(self.config, len(part)))
            endpoints.append(flats[s][taken[s] : taken[s] + groups])
            taken[s] += groups
        return endpoints

    def handed_over(self) -> None:
        for server in self.servers:
            server.handed_over()

    def close(self) -> list[ServerStats | None]:
        return [server.close() for server in self.servers]

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.servers if s.error), None)

    def figures(self, served: list[ServerStats | None]) -> list[dict]:
        """Per server: its device, rows, forward calls and busy seconds (for the run's stats)."""
        return [
            {
                "device": device_label(self.config, s),
                "rows": st.rows,
                "calls": st.calls,
                "busy": st.busy_seconds,
            }  # fmt: skip
            for s, st in enumerate(served)
            if st is not None
        ]
