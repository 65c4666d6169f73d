"""PyTorch evaluator: CPU everywhere; on CUDA, FP16 autocast, channels_last, pinned host buffers and
optional CUDA graphs (captured lazily per power-of-two batch bucket; a batch is padded to its bucket)."""

from __future__ import annotations

import numpy as np
import torch

from engine.backends.evaluator import Evaluator
from engine.core.moves import NUM_MOVE_LABELS
from engine.core.network import PolicyValueNetwork


def bucket_size(n: int, max_batch: int) -> int:
    """Smallest power of two >= n, capped at max_batch: few graphs, at most 2x padding."""
    return min(1 << (n - 1).bit_length(), max_batch)


class TorchEvaluator(Evaluator):
    def __init__(
        self,
        net: PolicyValueNetwork,
        max_batch: int = 256,
        device: str = "cpu",
        fp16: bool | None = None,
        cuda_graphs: bool = False,
        threads: int | None = None,
    ) -> None:
        """fp16 None = on for CUDA; cuda_graphs only applies on CUDA; threads sets torch's intra-op
        thread count (process-wide, so only when asked)."""
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.fp16 = self.cuda if fp16 is None else fp16
        self.cuda_graphs = cuda_graphs and self.cuda
        if threads:
            torch.set_num_threads(threads)
        super().__init__(max_batch, net.config.input2)
        self.name = (
            f"torch-{self.device.type}"
            + ("-fp16" if self.fp16 else "")
            + ("-graphs" if self.cuda_graphs else "")
        )
        self.net = net.to(self.device).eval()
        # on CUDA keep the pinned tensors themselves, so host->device copies are truly asynchronous
        self._t1, self._t2 = (
            self._pinned if self.cuda else (torch.from_numpy(self.x1), torch.from_numpy(self.x2))
        )
        if self.cuda:
            self.net = self.net.to(memory_format=torch.channels_last)
            self._d1 = torch.zeros(self.x1.shape, device=self.device).contiguous(
                memory_format=torch.channels_last
            )
            self._d2 = torch.zeros(self.x2.shape, device=self.device).contiguous(
                memory_format=torch.channels_last
            )
            self._policy = torch.zeros((max_batch, NUM_MOVE_LABELS), dtype=torch.float32).pin_memory()
            self._value = torch.zeros(max_batch, dtype=torch.float32).pin_memory()
            self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
            self._pool = None

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if self.device.type != "cuda":
            return super()._alloc_host(shape1, shape2)
        self._pinned = [torch.zeros(s, dtype=torch.float32).pin_memory() for s in (shape1, shape2)]
        return self._pinned[0].numpy(), self._pinned[1].numpy()

    def _forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.fp16):
            policy, value = self.net(x1, x2)
        return policy.float(), torch.sigmoid(value.float()).reshape(-1)

    def _graph(self, b: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        """Capture the forward pass for bucket `b` on first use (warm-up on a side stream, as required)."""
        if b not in self._graphs:
            x1, x2 = self._d1[:b], self._d2[:b]
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._forward(x1, x2)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                policy, value = self._forward(x1, x2)
            self._pool = graph.pool()
            self._graphs[b] = (graph, policy, value)
        return self._graphs[b]

    @torch.inference_mode()
    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.cuda:
            policy, value = self._forward(self._t1[:n], self._t2[:n])
            return policy.numpy(), value.numpy()
        self._d1[:n].copy_(self._t1[:n], non_blocking=True)
        self._d2[:n].copy_(self._t2[:n], non_blocking=True)
        if self.cuda_graphs:
            graph, policy, value = self._graph(bucket_size(n, self.max_batch))
            graph.replay()
        else:
            policy, value = self._forward(self._d1[:n], self._d2[:n])
        self._policy[:n].copy_(policy[:n], non_blocking=True)
        self._value[:n].copy_(value[:n], non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return self._policy[:n].numpy(), self._value[:n].numpy()
