"""PyTorch evaluator: CPU everywhere; CUDA with FP16 autocast and channels_last where available."""

from __future__ import annotations

import numpy as np
import torch

from engine.evaluator import Evaluator
from engine.network import PolicyValueNetwork


class TorchEvaluator(Evaluator):
    def __init__(
        self, net: PolicyValueNetwork, max_batch: int = 256, device: str = "cpu", fp16: bool | None = None
    ) -> None:
        self.device = torch.device(device)
        self.fp16 = (self.device.type == "cuda") if fp16 is None else fp16
        super().__init__(max_batch, net.config.input2)
        self.name = f"torch-{self.device.type}" + ("-fp16" if self.fp16 else "")
        self.net = net.to(self.device).eval()
        if self.device.type == "cuda":
            self.net = self.net.to(memory_format=torch.channels_last)
        self._t1 = torch.from_numpy(self.x1)
        self._t2 = torch.from_numpy(self.x2)

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if self.device.type != "cuda":
            return super()._alloc_host(shape1, shape2)
        pin = [torch.zeros(s, dtype=torch.float32).pin_memory() for s in (shape1, shape2)]
        return pin[0].numpy(), pin[1].numpy()

    @torch.inference_mode()
    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        x1 = self._t1[:n].to(self.device, non_blocking=True)
        x2 = self._t2[:n].to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            x1 = x1.contiguous(memory_format=torch.channels_last)
            x2 = x2.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.fp16):
            policy, value = self.net(x1, x2)
        policy = policy.float().cpu().numpy()
        value = torch.sigmoid(value.float()).reshape(-1).cpu().numpy()
        return policy, value
