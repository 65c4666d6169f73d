"""The inference server: many search processes, one evaluator, rows through shared memory."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.backends.evaluator import Evaluator, LatencyModelEvaluator, UniformEvaluator
from engine.backends.inference_server import ClientEvaluator, InferenceServer, InferenceServerError
from engine.core.features import FEATURES2_NUM
from engine.core.moves import NUM_MOVE_LABELS
from engine.errors import UserError
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.processes import run_selfplay
from tests.usi_helpers import save_material_model

REPO = Path(__file__).resolve().parent.parent
CTX = mp.get_context("spawn")


class RowEvaluator(Evaluator):
    """Outputs that depend on every input of the row and on nothing else (0/1 features sum exactly),
    so a row routed to the wrong client or slot, or left unwritten, shows."""

    name = "row"

    def __init__(self, max_batch: int = 64, input2: int = FEATURES2_NUM) -> None:
        super().__init__(max_batch, input2)
        self._weights = np.arange(NUM_MOVE_LABELS, dtype=np.float32) / NUM_MOVE_LABELS

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        s1 = self.x1[:n].reshape(n, -1) @ np.arange(self.x1[0].size, dtype=np.float32) % 1009
        s2 = self.x2[:n].reshape(n, -1).sum(1)
        policy = s1[:, None] + self._weights[None, :]
        return policy.astype(np.float32), (s2 / self.x2[0].size).astype(np.float32)


def slow_row_evaluator(max_batch: int = 64) -> Evaluator:
    return LatencyModelEvaluator(max_batch, a_ms=2.0, b_ms=0.0, inner=RowEvaluator(max_batch))


def test_latency_model_returns_the_wrapped_outputs_after_its_latency():
    inner = RowEvaluator(32)
    ev = LatencyModelEvaluator(32, a_ms=2.0, b_ms=0.5, inner=inner)
    assert (ev.x1 is inner.x1) and (ev.x2 is inner.x2)  # rows are filled once, where the inner reads them
    _random_rows(ev, 10, np.random.default_rng(0))
    policy, value = ev.evaluate(10)
    want_policy, want_value = RowEvaluator(32).evaluate_features(ev.x1[:10], ev.x2[:10])
    np.testing.assert_array_equal(policy, want_policy)
    np.testing.assert_array_equal(value, want_value)
    assert ev.busy_seconds >= (2.0 + 0.5 * 10) / 1000  # a sleep never ends early
    with pytest.raises(ValueError, match="must be >= 0"):
        LatencyModelEvaluator(8, a_ms=-1)


def test_latency_model_submit_returns_at_once_and_models_one_call_at_a_time():
    ev = LatencyModelEvaluator(32, a_ms=200.0, b_ms=1.0, inner=RowEvaluator(32))
    rng = np.random.default_rng(1)
    x1 = rng.integers(0, 2, ev.x1[:4].shape).astype(np.float32)
    x2 = rng.integers(0, 2, ev.x2[:4].shape).astype(np.float32)
    start = time.perf_counter()
    first, second = ev.submit(x1, x2), ev.submit(x1[:2], x2[:2])
    submitted = time.perf_counter()
    policy, value = second()
    waited = time.perf_counter()
    want_policy, want_value = RowEvaluator(32).evaluate_features(x1[:2], x2[:2])
    np.testing.assert_array_equal(policy, want_policy)
    np.testing.assert_array_equal(value, want_value)
    assert first()[0].shape == (4, NUM_MOVE_LABELS)
    # the modelled device ran the two calls one after the other: (200 + 4) ms, then (200 + 2) ms
    assert ev.busy_seconds == pytest.approx(0.406, abs=0.01)
    assert waited - start >= 0.406 > submitted - start


def test_loop_passes_processes_and_the_server_choice_to_selfplay(tmp_path):
    from train.loop.config import LoopConfig, selfplay_config

    cfg = LoopConfig(dir=str(tmp_path), selfplay_processes=3, inference_server="on")
    config = selfplay_config(cfg, 1, tmp_path / "sp", tmp_path / "m.onnx")
    assert (config.processes, config.inference_server) == (3, "on")
    with pytest.raises(UserError, match="--inference-server must be one of auto, on, off"):
        LoopConfig(dir=str(tmp_path), inference_server="gpu").validate()


def _random_rows(ev: Evaluator, n: int, rng: np.random.Generator) -> None:
    ev.x1[:n] = rng.integers(0, 2, ev.x1[:n].shape)
    ev.x2[:n] = rng.integers(0, 2, ev.x2[:n].shape)


def _client(endpoint, seed: int, calls: int, results) -> None:
    """A client process: random 0/1 rows, returns its inputs and the outputs it got (test only)."""
    rng = np.random.default_rng(seed)
    with ClientEvaluator(endpoint, timeout=60) as ev:
        for call in range(calls):
            n = int(rng.integers(1, ev.max_batch + 1))
            if call % 3 == 0:  # the blocking call on the host buffers
                _random_rows(ev, n, rng)
                x1, x2 = ev.x1[:n], ev.x2[:n]
                policy, value = ev.evaluate(n)
            else:  # submit: rows written in the lent buffers, or the caller's own (copied in)
                x1, x2 = (
                    ev.input_buffers(n)
                    if call % 3 == 1
                    else (np.empty_like(ev.x1[:n]), np.empty_like(ev.x2[:n]))
                )
                x1[:] = rng.integers(0, 2, x1.shape)
                x2[:] = rng.integers(0, 2, x2.shape)
                policy, value = ev.submit(x1, x2)()
            results.put((seed, x1.copy(), x2.copy(), policy.copy(), value.copy()))
    results.put((seed, None, None, None, None))


@pytest.mark.timeout(120)
def test_clients_get_exactly_what_the_served_evaluator_returns_for_their_rows():
    clients, calls = 3, 12
    server = InferenceServer(
        functools.partial(slow_row_evaluator, 3 * 16), clients, client_batch=16, gather_wait=0.5, ctx=CTX
    )
    endpoints = server.start()
    results = CTX.Queue()
    procs = [CTX.Process(target=_client, args=(e, seed, calls, results)) for seed, e in enumerate(endpoints)]
    for p in procs:
        p.start()
    server.handed_over()
    reference = RowEvaluator(16)
    finished, checked, rows = 0, 0, 0
    while finished < clients:
        seed, x1, x2, policy, value = results.get(timeout=60)
        if x1 is None:
            finished += 1
            continue
        n = len(x1)
        reference.x1[:n], reference.x2[:n] = x1, x2
        want_policy, want_value = reference.evaluate(n)
        np.testing.assert_array_equal(policy, want_policy)
        np.testing.assert_array_equal(value, want_value)
        checked += 1
        rows += n
    for p in procs:
        p.join(30)
    stats = server.close()
    assert checked == clients * calls
    assert stats is not None and stats.calls < clients * calls  # rows of several clients per call
    assert stats.rows == rows


@pytest.mark.timeout(60)
def test_a_dead_server_is_a_clear_error_not_a_hang():
    server = InferenceServer(functools.partial(UniformEvaluator, 8), 1, client_batch=8, ctx=CTX)
    (endpoint,) = server.start()
    client = ClientEvaluator(endpoint, timeout=30)
    policy, value = client.evaluate(3)
    assert policy.shape == (3, NUM_MOVE_LABELS) and np.all(value == 0.5)
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.join(10)
    with pytest.raises(InferenceServerError, match="inference server process has ended"):
        client.evaluate(3)
    client.close()
    assert server.close() is None and "ended" in (server.error or "")


def _failing_factory(max_batch: int) -> Evaluator:
    raise UserError("models/missing.pt: model not found")


@pytest.mark.timeout(60)
def test_a_server_that_cannot_build_its_evaluator_reports_why(tmp_path):
    config = SelfPlayConfig(out_dir=tmp_path, games=2, processes=2, progress=False)
    with pytest.raises(UserError, match="model not found"):
        run_selfplay(config, shared_evaluator=_failing_factory)
    assert not list(tmp_path.glob("*.hcpe3"))  # no worker started


def _slow_factory(max_batch: int) -> Evaluator:
    time.sleep(4)  # an engine build
    return UniformEvaluator(max_batch)


@pytest.mark.timeout(60)
def test_sigint_during_the_servers_build_is_an_interrupted_run(tmp_path):
    config = SelfPlayConfig(out_dir=tmp_path, games=4, processes=2, progress=False)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    stats = run_selfplay(config, shared_evaluator=_slow_factory)
    assert stats.interrupted and stats.games == 0  # a loop reruns the step rather than train on nothing
    assert not list(tmp_path.glob("*.hcpe3"))


def _games(out: Path) -> list[tuple]:
    """Every game in the folder's files as (moves, evals, result, visit targets), sorted: the order of
    games across and within files depends on timing, their content must not."""
    games = []
    for path in sorted(out.glob("*.hcpe3")):
        for g in iter_hcpe3_games(path):
            targets = tuple(
                (tuple(c["move16"].tolist()), tuple(c["visitNum"].tolist())) for c in g.candidates
            )
            moves = tuple(g.moves["selectedMove16"].tolist())
            games.append((moves, tuple(g.moves["eval"].tolist()), int(g.result), targets))
    return sorted(games)


@pytest.mark.timeout(300)
def test_inference_server_writes_the_same_games_as_one_process(tmp_path, monkeypatch):
    """Same seed, same games, whichever process played them and whatever rows shared their batch.
    onnxruntime: its outputs for a row do not depend on the batch (torch's CPU convolutions do)."""
    monkeypatch.setenv("GUMBEL_SHOGI_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "material.pt"
    save_material_model(model)
    common = dict(
        games=6, parallel=3, sims=8, considered=4, max_moves=12, seed=5, model=str(model),
        backend="onnx", device="cpu", batch=32, threads=1, progress=False,
    )  # fmt: skip
    one = run_selfplay(SelfPlayConfig(out_dir=tmp_path / "one", **common))
    served = run_selfplay(
        SelfPlayConfig(out_dir=tmp_path / "served", processes=2, inference_server="on", **common)
    )
    assert served.server_calls > 0 and len(list((tmp_path / "served").glob("*.hcpe3"))) == 2
    assert one.games == served.games == 6 and one.positions == served.positions
    games = _games(tmp_path / "one")
    assert len(games) == 6 and len({g[0] for g in games}) > 1
    assert _games(tmp_path / "served") == games


@pytest.mark.timeout(300)
@pytest.mark.parametrize("server", ["on", "off"])
def test_a_killed_worker_does_not_stop_the_others(tmp_path, server):
    out = tmp_path / "out"
    per_worker = 24
    model = tmp_path / "material.pt"
    save_material_model(model)
    config = SelfPlayConfig(
        out_dir=out, games=2 * per_worker, parallel=1, sims=4, considered=4, max_moves=10, processes=2,
        inference_server=server, model=str(model), backend="torch", threads=1, progress=False,
    )  # fmt: skip
    killed: list[int] = []

    def kill_worker_one() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(out.glob("*-w1.hcpe3"))
            worker = [p for p in mp.active_children() if p.name == "selfplay-w1"]
            if files and files[0].stat().st_size > 0 and worker:
                os.kill(worker[0].pid, signal.SIGKILL)
                killed.append(worker[0].pid)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_worker_one, daemon=True)
    killer.start()
    stats = run_selfplay(config)
    killer.join()
    assert killed, "worker 1 was never seen writing"
    assert stats.workers_lost == 1 and (stats.server_calls > 0) == (server == "on")
    (w0,) = out.glob("*-w0.hcpe3")
    (w1,) = out.glob("*-w1.hcpe3")
    assert len(list(iter_hcpe3_games(w0))) == per_worker  # the other worker played all its games
    written = len(list(iter_hcpe3_games(w1)))  # whole games only, however the kill fell
    assert 1 <= written < per_worker
    assert abs(stats.games - (per_worker + written)) <= 2  # its last game may be counted, not written


@pytest.mark.timeout(180)
def test_sigint_with_the_inference_server_writes_every_finished_game(tmp_path):
    model = tmp_path / "material.pt"
    save_material_model(model)
    out = tmp_path / "out"
    cmd = [
        sys.executable, str(REPO / "bin" / "selfplay"), "--model", str(model), "--backend", "torch",
        "--device", "cpu", "--out", str(out), "--games", "100000", "--parallel", "4", "--sims", "4",
        "--considered", "4", "--max-moves", "16", "--processes", "2", "--inference-server", "on",
        "--threads", "1", "--no-progress",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not any(f.stat().st_size for f in out.glob("*.hcpe3")):
            assert time.monotonic() < deadline and proc.poll() is None, "no game written in time"
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "interrupted" in stdout and "inference server" in stdout
    files = sorted(out.glob("*.hcpe3"))
    assert 1 <= len(files) <= 2  # a worker's file appears with its first game
    games = [g for f in files for g in iter_hcpe3_games(f)]
    assert games and f"{sum(len(g.moves) for g in games)} positions" in stdout
