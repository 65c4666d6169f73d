#!/usr/bin/env python3
"""The GPU check: the figures a CUDA host must show, into one JSON file and one summary line.

Each section runs in its own process under its own time limit inside one budget, so a hang or a CUDA crash
costs one section (its one-line error goes into the JSON) and the others still run: environment;
agreement (FP16 vs FP32 on real positions); speed (rows/s, FP32 the baseline); training (AMP steps/s of
the trainer's step); selfplay (positions/s); usi (bin/usi_engine's nodes/s); then, as the budget allows,
tensorrt, inference (bench/inference.py --quick) and pytest (the GPU-gated tests). bench/gpu_check.sh is
the way in on a GPU host; --cpu-smoke runs every section on the CPU at toy sizes, to prove the code paths.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.console import say  # noqa: E402
from engine.errors import UserError, cli_main  # noqa: E402
from engine.fileio import atomic_write_text, check_output_file  # noqa: E402

LIMITS = {"policy_softmax_max_abs_diff": 0.02, "value_max_abs_diff": 0.02, "argmax_agreement_min": 0.98}
RESERVE_S = 20.0  # kept back for each required section still to come
MIN_SECTION_S = 10.0  # a section given less is skipped
CPU_ENV = {"OMP_NUM_THREADS": "1"}  # --cpu-smoke: a shared CPU's spinning OpenMP threads cost 20x
MODES = (("fp32", False, False), ("fp16", True, False), ("fp16_cuda_graphs", True, True))  # fp16, graphs
USI_POSITIONS = [("startpos", "startpos", []), ("opening", "startpos", ["7g7f", "3c3d", "2g2f", "8c8d"]),
                 ("middle", "sfen ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51",
                  [])]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work each section does: the GPU's sizes, or toy ones for --cpu-smoke."""

    smoke: bool
    device: str
    nets: tuple[str, ...]  # agreement and speed
    positions: int  # agreement
    batches: tuple[int, ...]  # speed
    seconds: float  # per speed measurement
    train: tuple[str, int, int, float, str]  # network, batch size, synthetic games, seconds timed, AMP
    selfplay: tuple[int, int, int, int]  # games at once, games, simulations, max moves
    byoyomi: int  # ms
    usi_positions: int
    usi_options: tuple[dict[str, str], ...]  # one engine run each


GPU = Sizes(False, "cuda", ("small", "resnet10"), 1024, (256, 1024), 1.0, ("resnet10", 1024, 64, 15.0,
            "fp16"), (256, 256, 32, 64), 3000, 3,
            ({}, {"DNN_Batch_Size": "128", "UCT_Threads": "3"}))  # fmt: skip
SMOKE = Sizes(True, "cpu", ("tiny", "small"), 32, (4, 16), 0.1, ("tiny", 64, 4, 1.5, "bf16"), (8, 8, 8, 8),
              500, 2, ({},))  # fmt: skip


def note(section: str, line: str) -> None:
    print(f"{section}: {line}", flush=True)


def si(x: float) -> str:
    """1234567 -> '1.23M': figures short enough for one summary line."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def network(name: str) -> tuple[Any, str]:
    """The net of a preset: the shipped model where it has that size ('small'), else random-init."""
    from engine.backends.choose import default_model_path
    from engine.core.network import build, load_model, preset

    shipped, c = default_model_path(), preset(name)
    net = load_model(shipped) if shipped else None
    if shipped and (net.config.blocks, net.config.channels, net.config.fcl) == (c.blocks, c.channels, c.fcl):
        return net, str(shipped.relative_to(REPO))
    return build(c, seed=0), "random init (seed 0)"


def sec_environment(s: Sizes) -> dict[str, Any]:
    import importlib.metadata as meta
    import platform

    import torch

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("numpy", "onnx", "onnxruntime", "cshogi", "numba", "llvmlite", "tqdm", "filelock"):
        with contextlib.suppress(meta.PackageNotFoundError):
            out[dist] = meta.version(dist)
    out["installed_from_wheels"] = os.environ.get("GPU_CHECK_INSTALLED", "").split()
    out["cuda"], out["cudnn"], out["gpu"] = torch.version.cuda, torch.backends.cudnn.version(), None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out |= {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1), "multiprocessors":
                p.multi_processor_count, "compute_capability": f"{p.major}.{p.minor}"}  # fmt: skip
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            q = ["--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"]
            smi = subprocess.run(["nvidia-smi", *q], capture_output=True, text=True, timeout=20)
            out["nvidia_smi"] = (smi.stdout or smi.stderr).strip()
    elif not s.smoke:
        raise RuntimeError("torch sees no CUDA device")
    note("environment", json.dumps(out))
    return out


def compare(p: Any, v: Any, p32: Any, v32: Any) -> dict[str, Any]:
    """Policy softmax and value max abs differences, argmax agreement, and whether all are in LIMITS."""
    import numpy as np

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    soft = float(np.abs(softmax(p) - softmax(p32)).max())
    val = float(np.abs(v - v32.astype(np.float64)).max())
    agree = float((p.argmax(1) == p32.argmax(1)).mean())
    ok = soft <= LIMITS["policy_softmax_max_abs_diff"] and val <= LIMITS["value_max_abs_diff"]
    return {"policy_softmax_max_abs_diff": soft, "value_max_abs_diff": val, "argmax_agreement": agree,
            "ok": ok and agree >= LIMITS["argmax_agreement_min"]}  # fmt: skip


def sec_agreement(s: Sizes) -> dict[str, Any]:
    import torch

    from engine.backends.torch_evaluator import TorchEvaluator
    from engine.core.position import random_positions

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # a true FP32 reference
    boards = random_positions(s.positions, seed=1)
    out: dict[str, Any] = {"positions": len(boards), "reference": f"torch {s.device} FP32, TF32 off",
                           "limits": LIMITS, "nets": {}}  # fmt: skip
    for name in s.nets:
        net, weights = network(name)
        with TorchEvaluator(net, 256, s.device, fp16=False) as ev:
            p32, v32 = ev.evaluate_boards(boards)
        out["nets"][name] = row = {"weights": weights}
        for label, graphs in (("fp16", False), ("fp16_cuda_graphs", True)):
            with TorchEvaluator(net, 256, s.device, fp16=True, cuda_graphs=graphs) as ev:
                row[label] = m = compare(*ev.evaluate_boards(boards), p32, v32)
            note("agreement", f"{name} {label}: softmax diff {m['policy_softmax_max_abs_diff']:.2e}, value "
                 f"diff {m['value_max_abs_diff']:.2e}, argmax agree {m['argmax_agreement']:.4f}")  # fmt: skip
    out["ok"] = all(r[k]["ok"] for r in out["nets"].values() for k in ("fp16", "fp16_cuda_graphs"))
    return out


def timed(call: Callable[[int], Any], seconds: float, sync: Callable[[], Any] = lambda: None) -> float:
    """call(k) 3 times to warm up, then for about `seconds` (at least 5 calls); returns calls/s."""
    for k in range(3):
        call(k)
    sync()
    n, start = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - start < seconds:
        call(n)
        n += 1
    sync()
    return n / (time.perf_counter() - start)


def sec_speed(s: Sizes) -> dict[str, Any]:
    import torch

    from engine.backends.torch_evaluator import TorchEvaluator
    from engine.core.features import features_from_boards
    from engine.core.network import build, preset
    from engine.core.position import random_positions

    x1, x2 = features_from_boards(random_positions(max(s.batches), seed=2))
    out: dict[str, Any] = {"baseline": "fp32", "cudnn_tf32": torch.backends.cudnn.allow_tf32, "nets": {}}
    for name in s.nets:
        net = build(preset(name), seed=0)
        out["nets"][name] = rows = {}
        for b in s.batches:
            rows[f"b{b}"] = row = {}
            for label, fp16, graphs in MODES:
                with TorchEvaluator(net, b, s.device, fp16=fp16, cuda_graphs=graphs) as ev:
                    ev.x1[:b], ev.x2[:b] = x1[:b], x2[:b]
                    calls = timed(lambda _, e=ev, n=b: e.evaluate(n), s.seconds)
                row[f"{label}_rows_per_s"] = round(b * calls, 1)
                if label != "fp32":
                    row[f"{label}_vs_fp32"] = round(row[f"{label}_rows_per_s"] / row["fp32_rows_per_s"], 2)
            note("speed", f"{name} b{b}: fp32 {si(row['fp32_rows_per_s'])} rows/s, fp16 "
                 f"{si(row['fp16_rows_per_s'])} (x{row['fp16_vs_fp32']}), fp16+graphs "
                 f"{si(row['fp16_cuda_graphs_rows_per_s'])} (x{row['fp16_cuda_graphs_vs_fp32']})"
                 )  # fmt: skip
    return out


def sec_training(s: Sizes) -> dict[str, Any]:
    import numpy as np
    import torch

    from engine.core.features import FEATURES2_NUM
    from engine.core.network import build, preset
    from train.data import synthetic
    from train.data.dataset import Batch, BatchDataset, hcpe3_cache_for, open_corpus, to_device
    from train.trainer.config import TrainConfig
    from train.trainer.distributed import Dist, amp_dtype
    from train.trainer.optimization import make_optimization, train_step

    net_name, batch, games, timed_s, amp = s.train
    device = torch.device(s.device)
    with tempfile.TemporaryDirectory() as tmp:  # the trainer's data path: hcpe3 -> cache -> batches
        data = Path(tmp) / "synthetic.hcpe3"
        positions = synthetic.write_hcpe3(data, games, seed=0)
        cache = hcpe3_cache_for([data], Path(tmp), log=lambda m: None, progress=False)
        dataset = BatchDataset(open_corpus([], [cache], FEATURES2_NUM), mirror=0.5)
        rng, batches = np.random.default_rng(0), []
        for k in range(4):  # preloaded on the device: the figure is the GPU's, not the loader's
            idx = rng.choice(len(dataset), batch, replace=len(dataset) < batch)
            batches.append(to_device(Batch(*map(torch.from_numpy, dataset[(idx, (0, k))])), device))
    cfg = TrainConfig(network=net_name, batch_size=batch, amp=amp)
    dtype = amp_dtype(cfg.amp, device)
    net = build(preset(cfg.network), seed=0).to(device).train()
    optimizer, scheduler, scaler, _ = make_optimization(net, cfg, 10**6, device, dtype)

    logs: list[torch.Tensor] = []  # (policy loss sum, policy rows, value loss sum, rows) a step

    def step(k: int) -> None:
        logs.append(train_step(net, [batches[k % 4]], optimizer, scaler, cfg, Dist(), dtype, device))
        scheduler.step()

    rate = timed(step, timed_s, torch.cuda.synchronize if device.type == "cuda" else lambda: None)
    n = len(logs) - 3
    losses = [p / max(pr, 1) + v / max(r, 1) for p, pr, v, r in torch.stack(logs).tolist()]
    bad = [k for k, x in enumerate(losses) if not math.isfinite(x)]
    out = {"network": net_name, "amp": str(dtype).replace("torch.", "") if dtype else "off",
           "batch_size": batch, "optimizer": cfg.optimizer, "data_positions": positions, "timed_steps": n,
           "steps_per_s": round(rate, 2), "positions_per_s": round(rate * batch, 1),
           "first_loss": losses[0], "last_loss": losses[-1], "finite": not bad,
           "loss_scale": float(scaler.get_scale()), "ok": not bad}  # fmt: skip
    if bad:
        out["problem"] = f"loss not finite at step {bad[0] + 1} of {len(losses)}"
    note("training", f"{net_name} b{batch} {out['amp']}: {out['steps_per_s']} steps/s, loss {losses[0]:.3f}"
         f" -> {losses[-1]:.3f}" + (f" ({out['problem']})" if bad else ""))  # fmt: skip
    return out


def sec_selfplay(s: Sizes) -> dict[str, Any]:
    from engine.backends.choose import create_evaluator, default_model_path
    from engine.selfplay.config import SelfPlayConfig
    from engine.selfplay.processes import run_selfplay

    parallel, games, sims, max_moves = s.selfplay
    model = default_model_path()
    ev = create_evaluator(model, "torch", max_batch=max(256, parallel), device=s.device, log=lambda m: None)
    with tempfile.TemporaryDirectory() as tmp, ev:
        warm_up = SelfPlayConfig(out_dir=Path(tmp) / "warm-up", games=4, parallel=4, sims=sims, max_moves=4,
                                 progress=False, backend="torch", device=s.device)  # fmt: skip
        start = time.perf_counter()
        run_selfplay(warm_up, ev)  # kernels compiled (or loaded from numba's cache)
        warm = time.perf_counter() - start
        timed_run = dataclasses.replace(warm_up, out_dir=Path(tmp) / "timed", games=games, parallel=parallel,
                                        max_moves=max_moves)  # fmt: skip
        st = run_selfplay(timed_run, ev)
    out = {"model": str(model.relative_to(REPO)) if model else "random init", "evaluator": ev.name,
           "parallel": parallel, "groups": 2, "sims": sims, "max_moves": max_moves, "games": st.games,
           "positions": st.positions, "seconds": round(st.seconds, 2), "warm_up_s": round(warm, 1),
           "positions_per_s": round(st.pos_per_s, 1),
           "rows_per_batch": round(st.nn_positions / max(st.nn_batches, 1), 1)}  # fmt: skip
    note("selfplay", f"{ev.name}: {out['positions_per_s']} pos/s ({st.positions} positions in "
         f"{st.seconds:.1f} s, {out['rows_per_batch']} rows/batch; warm-up {warm:.1f} s)")  # fmt: skip
    return out


def sec_usi(s: Sizes) -> dict[str, Any]:
    from engine.usi_client import EngineSpec, started

    command = shlex.join([sys.executable, str(REPO / "bin" / "usi_engine")])
    out: dict[str, Any] = {"byoyomi_ms": s.byoyomi, "nps": "nodes / wall seconds of go", "runs": []}
    for extra in s.usi_options:
        options = {"Backend": "torch", "USI_OwnBook": "false", **extra}
        start = time.perf_counter()
        with started([EngineSpec(command, options)], timeout=60) as (engine,):  # the model loaded at isready
            run: dict[str, Any] = {"options": options, "startup_s": round(time.perf_counter() - start, 1),
                                   "moves": []}  # fmt: skip
            for label, sfen, moves in USI_POSITIONS[: s.usi_positions]:
                engine.usinewgame()
                engine.position(moves, sfen)
                start = time.perf_counter()
                best, _ = engine.go(byoyomi=s.byoyomi)
                secs, nodes = time.perf_counter() - start, engine.last_nodes or 0
                run["moves"].append({"position": label, "bestmove": best, "nodes": nodes,
                                     "seconds": round(secs, 2), "nps": round(nodes / secs, 1)})  # fmt: skip
        run["nps"] = round(sum(m["nps"] for m in run["moves"]) / len(run["moves"]), 1)
        out["runs"].append(run)
        each = ", ".join(f"{m['position']} {si(m['nps'])}" for m in run["moves"])
        note("usi", f"{extra or 'default options'}: {si(run['nps'])} nps ({each})")
    return out


def sec_tensorrt(s: Sizes) -> dict[str, Any]:
    """Whether TensorRT is here; its figures come from the inference and pytest sections."""
    import importlib.util

    if importlib.util.find_spec("tensorrt") is None:
        return {"skipped": "tensorrt not installed"}
    return {"present": True, "figures": "in the inference and pytest sections"}


def command_section(name: str, argv: list[str]) -> Callable[[Sizes], dict[str, Any]]:
    """An optional extra: run a command, keep its exit status and its last lines."""

    def run(s: Sizes) -> dict[str, Any]:
        if s.smoke:
            return {"skipped": "not run with --cpu-smoke"}
        proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True)
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-40:]
        print("\n".join(f"{name}: {ln}" for ln in lines), flush=True)
        return {"command": shlex.join(argv), "exit_status": proc.returncode, "lines": lines,
                "ok": proc.returncode == 0}  # fmt: skip

    return run


@dataclasses.dataclass(frozen=True)
class Section:
    run: Callable[[Sizes], dict[str, Any]]
    timeout: float  # seconds on a GPU host; --cpu-smoke allows twice as long (a slow, shared CPU)
    required: bool = True


INFERENCE = ["bench/inference.py", "--quick", "--seconds", "0.5"]
PYTEST = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "cuda or trt",
          "tests/test_backends.py", "tests/test_trt.py"]  # fmt: skip
SECTIONS = {
    "environment": Section(sec_environment, 60),
    "agreement": Section(sec_agreement, 90),
    "speed": Section(sec_speed, 120),
    "training": Section(sec_training, 120),
    "selfplay": Section(sec_selfplay, 150),
    "usi": Section(sec_usi, 150),
    "tensorrt": Section(sec_tensorrt, 150, required=False),
    "inference": Section(command_section("inference", INFERENCE), 120, required=False),
    "pytest": Section(command_section("pytest", PYTEST), 150, required=False),
}


def child(name: str, result: Path, smoke: bool) -> int:
    """One section in this process: its figures, or its one-line error, written to `result`."""
    try:
        rec = SECTIONS[name].run(SMOKE if smoke else GPU)
    except Exception as e:  # noqa: BLE001 - any failure is this section's result; the others still run
        traceback.print_exc()
        text = str(e).strip()
        rec = {"error": f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")[:300]}
    atomic_write_text(result, json.dumps(rec))
    return 1 if "error" in rec else 0


def run_child(name: str, smoke: bool, limit: float) -> dict[str, Any]:
    """Run one section's process for at most `limit` seconds, its lines shown as they come; its record,
    with `error` when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        result, err_path = Path(tmp) / "result.json", Path(tmp) / "stderr"
        argv = [sys.executable, __file__, "--section", name, str(result)] + ["--cpu-smoke"] * smoke
        start, timed_out = time.monotonic(), False
        with open(err_path, "w+") as err:
            env = {**(CPU_ENV if smoke else {}), **os.environ, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            relay = threading.Thread(target=lambda: [say(ln.rstrip("\n"), sys.stdout) for ln in proc.stdout],
                                     daemon=True)  # fmt: skip
            relay.start()
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, stop_group(proc)
            relay.join(5)
        rec = json.loads(result.read_text()) if result.is_file() else {}
        rec["seconds"] = round(time.monotonic() - start, 1)
        tail = [ln for ln in err_path.read_text(errors="replace").splitlines() if ln.strip()][-5:]
    if timed_out:
        rec["error"] = f"timed out after {limit:.0f} s"
    elif rc != 0 and "error" not in rec:
        rec["error"] = tail[-1][:300] if tail else f"exit status {rc}"
    if "error" in rec:
        rec["stderr_tail"] = tail
    return rec


def stop_group(proc: subprocess.Popen) -> int:
    """SIGTERM to the section's process group (its engines and workers too), SIGKILL 5 s later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=5)
    return proc.wait()


def failed(rec: dict[str, Any]) -> str | None:
    """Why a section failed (None: it passed, or was skipped on purpose)."""
    out_of_limits = rec.get("problem", "figures out of limits") if rec.get("ok") is False else None
    return rec.get("error") or out_of_limits


def summary(results: dict[str, Any], out: Path) -> str:
    """The one closing line: the headline figures, then what failed."""
    sec = results["sections"]
    smoke = " --cpu-smoke" if results["mode"] == "cpu-smoke" else ""
    parts = [f"gpu_check{smoke}: {sec.get('environment', {}).get('gpu') or 'CPU'}"]
    for name, rows in sec.get("speed", {}).get("nets", {}).items():
        b, r = next(reversed(rows.items()))
        parts.append(f"{name} fp16 {b} {si(r['fp16_rows_per_s'])} rows/s (graphs "
                     f"{si(r['fp16_cuda_graphs_rows_per_s'])}, fp32 {si(r['fp32_rows_per_s'])})")  # fmt: skip
    if "steps_per_s" in (tr := sec.get("training", {})):
        parts.append(f"AMP {tr['amp']} {tr['network']} b{tr['batch_size']} {tr['steps_per_s']} steps/s loss "
                     f"{tr['first_loss']:.3f}->{tr['last_loss']:.3f}")  # fmt: skip
    if "positions_per_s" in (sp := sec.get("selfplay", {})):
        parts.append(f"selfplay {si(sp['positions_per_s'])} pos/s")
    if runs := sec.get("usi", {}).get("runs"):
        parts.append("usi nps " + "/".join(si(r["nps"]) for r in runs))
    if "agreement" in sec:
        parts.append("agreement ok" if sec["agreement"].get("ok") else "agreement FAILED")
    bad = [f"{n} ({failed(r)})" for n, r in sec.items() if failed(r)]
    return ", ".join([*parts, f"failed: {'; '.join(bad)}" if bad else "all sections ok"]) + f" -> {out}"


def drive(names: list[str], smoke: bool, budget: float, timeouts: dict[str, float], out: Path) -> int:
    """Every section in turn; the JSON rewritten after each. Exit status 1 when a required one failed."""
    from tqdm import tqdm

    start = time.monotonic()
    results: dict[str, Any] = {"tool": "bench/gpu_check.py", "mode": "cpu-smoke" if smoke else "gpu",
                               "date": time.strftime("%Y-%m-%d %H:%M"), "budget_s": budget,
                               "sections": {}}  # fmt: skip
    with tqdm(total=len(names), unit="section", disable=None) as bar:
        for k, name in enumerate(names):
            sec = SECTIONS[name]
            later = sum(SECTIONS[n].required for n in names[k + 1 :]) if sec.required else 0
            left = budget - (time.monotonic() - start)
            room = left - RESERVE_S * later
            limit = min(timeouts.get(name, sec.timeout * (2 if smoke else 1)), room)
            if room < MIN_SECTION_S:
                rec = {"error": f"skipped: {max(left, 0):.0f} s of the {budget:.0f} s budget left"}
            else:
                rec = run_child(name, smoke, limit)
            if failed(rec):
                say(f"{name}: FAILED: {failed(rec)}", sys.stdout)
            results["sections"][name] = rec
            results["elapsed_s"] = round(time.monotonic() - start, 1)
            atomic_write_text(out, json.dumps(results, indent=1) + "\n")  # a killed run keeps what was done
            bar.update(1)
    results["summary"] = summary(results, out)
    atomic_write_text(out, json.dumps(results, indent=1) + "\n")
    print(f"gpu_check: results in {out}")
    print(results["summary"], flush=True)
    return 1 if any(failed(r) for n, r in results["sections"].items() if SECTIONS[n].required) else 0


def timeout_arg(item: str) -> tuple[str, float]:
    """--timeout NAME=SECONDS."""
    name, _, value = item.partition("=")
    if name not in SECTIONS or not value.replace(".", "", 1).isdigit():
        raise argparse.ArgumentTypeError(f"{item!r}: needs NAME=SECONDS, NAME one of {', '.join(SECTIONS)}")
    return name, float(value)


@cli_main("gpu_check")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "runs"
    p.add_argument("--out", type=Path, default=out / "gpu_check.json", help="the JSON file")
    p.add_argument("--budget", type=float, default=440.0, help="seconds for all sections (default 440)")
    p.add_argument("--sections", help=f"comma-separated, in this order by default: {','.join(SECTIONS)}")
    p.add_argument("--timeout", action="append", type=timeout_arg, default=[], metavar="NAME=SECONDS",
                   help="one section's limit")  # fmt: skip
    p.add_argument("--cpu-smoke", action="store_true", help="every section on the CPU at toy sizes")
    p.add_argument("--section", nargs=2, help=argparse.SUPPRESS)  # a child: NAME RESULT_FILE
    a = p.parse_args(argv)
    if a.section:
        return child(a.section[0], Path(a.section[1]), a.cpu_smoke)
    names = a.sections.split(",") if a.sections else list(SECTIONS)
    if unknown := [n for n in names if n not in SECTIONS]:
        raise UserError(f"--sections: no section {unknown[0]!r} (sections: {', '.join(SECTIONS)})")
    if not a.budget > 0:
        raise UserError(f"--budget must be positive, got {a.budget:g}")
    return drive(names, a.cpu_smoke, a.budget, dict(a.timeout), check_output_file(a.out, "--out"))


if __name__ == "__main__":
    sys.exit(main())
