#!/usr/bin/env python3
"""How long a GUI waits for bin/usi_engine: time to `usiok` after start, and to `readyok` after that
(the model load), started as a GUI starts it (the file itself, its own process). Also says whether
torch or onnxruntime was imported before `usiok` (they must not be: seconds on a loaded machine).

One run measures a new machine and a used one: the first start with empty caches (the exported ONNX,
the int8 model and numba's search kernels all in a fresh temp folder, through GUMBEL_SHOGI_CACHE and
NUMBA_CACHE_DIR), then --runs starts with those caches warm, then `bin/usi_engine --prepare` into
another fresh folder and a start after it. The first isready's `info string` lines are counted: a
long one must keep saying what it does.

Usage: bench/usi_startup.py [--runs N] [--model PATH] [--backend auto|torch|onnx|trt]
(--prepare prepares the default options: with --backend, the start after it may still build.)"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "bin" / "usi_engine"
HEAVY = ("torch", "onnxruntime")
TIMEOUT_S = 300.0  # a first start compiles and calibrates: tens of seconds on a loaded machine


@dataclass
class Start:
    usiok_s: float  # from the start of the process
    readyok_s: float  # from isready
    heavy: list[str]  # torch / onnxruntime imported before usiok
    infos: list[str]  # the info strings between isready and readyok


def fresh_caches(root: Path) -> dict[str, str]:
    """The environment of a machine that has never run the engine: its caches in empty folders."""
    return {"GUMBEL_SHOGI_CACHE": str(root / "models"), "NUMBA_CACHE_DIR": str(root / "kernels")}


def _read_until(proc: subprocess.Popen, prefix: str) -> list[str]:
    """Stdout lines up to one starting with `prefix`; an engine silent for TIMEOUT_S is killed."""
    timer = threading.Timer(TIMEOUT_S, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            if line.startswith(prefix):
                return lines
            lines.append(line.strip())
        raise RuntimeError(f"{ENGINE} ended (or hung) before {prefix!r}")
    finally:
        timer.cancel()


def one_start(options: dict[str, str], caches: dict[str, str]) -> Start:
    env = {**os.environ, **caches, "PYTHONPROFILEIMPORTTIME": "1"}  # import log on stderr, in order
    imports: list[str] = []
    usiok = threading.Event()

    start = time.monotonic()
    proc = subprocess.Popen(
        [str(ENGINE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, bufsize=1, env=env,
    )  # fmt: skip

    def watch_imports() -> None:
        for line in proc.stderr:
            name = line.rsplit("|", 1)[-1].strip()
            if not usiok.is_set() and name.split(".")[0] in HEAVY and name not in imports:
                imports.append(name)

    watcher = threading.Thread(target=watch_imports, daemon=True)
    watcher.start()
    try:
        proc.stdin.write("usi\n")
        proc.stdin.flush()
        _read_until(proc, "usiok")
        to_usiok = time.monotonic() - start
        usiok.set()
        for name, value in options.items():
            proc.stdin.write(f"setoption name {name} value {value}\n")
        ready_start = time.monotonic()
        proc.stdin.write("isready\n")
        proc.stdin.flush()
        infos = [line for line in _read_until(proc, "readyok") if line.startswith("info string")]
        to_readyok = time.monotonic() - ready_start
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    return Start(to_usiok, to_readyok, [n for n in imports if "." not in n], infos)


def timed_prepare(model: str | None, caches: dict[str, str]) -> float:
    """Seconds `bin/usi_engine --prepare` takes, its output shown."""
    argv = [str(ENGINE), "--prepare", *(["--model", model] if model else [])]
    start = time.monotonic()
    env = {**os.environ, **caches}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.monotonic() - start
    _quote((proc.stdout + proc.stderr).splitlines())
    if proc.returncode != 0:
        raise RuntimeError(f"--prepare failed (exit status {proc.returncode})")
    return seconds


def _quote(lines: list[str]) -> None:
    print("".join(f"    | {line}\n" for line in lines), end="", flush=True)


def _show(label: str, s: Start) -> None:
    """One start's times and what it said while the GUI waited for readyok."""
    print(f"{label}: usiok {s.usiok_s * 1000:6.0f} ms   readyok {s.readyok_s * 1000:6.0f} ms", flush=True)
    _quote(s.infos)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="starts with warm caches")
    ap.add_argument("--model", default=None, help="DNN_Model (default: the engine's default)")
    ap.add_argument("--backend", default=None, help="Backend option (default: the engine's default, auto)")
    args = ap.parse_args()
    options = {k: v for k, v in (("DNN_Model", args.model), ("Backend", args.backend)) if v}
    with tempfile.TemporaryDirectory(prefix="usi-startup-") as tmp:
        caches = fresh_caches(Path(tmp) / "cold")
        first = one_start(options, caches)
        _show("first start, empty caches", first)
        warm = [one_start(options, caches) for _ in range(args.runs)]
        for s in warm:
            _show("later start, warm caches", s)
        print("--prepare, empty caches:", flush=True)
        prepared = fresh_caches(Path(tmp) / "prepared")
        prepare_s = timed_prepare(args.model, prepared)
        after = one_start(options, prepared)
        _show("start after --prepare", after)
    heavy = sorted({n for s in (first, *warm, after) for n in s.heavy})
    usiok = [s.usiok_s * 1000 for s in warm]
    readyok = [s.readyok_s * 1000 for s in warm]
    print(
        f"first readyok (empty caches) {first.readyok_s:.1f} s with {len(first.infos)} info strings;"
        f" median of {args.runs} later: usiok {statistics.median(usiok):.0f} ms (max {max(usiok):.0f}),"
        f" readyok {statistics.median(readyok):.0f} ms (max {max(readyok):.0f});"
        f" --prepare {prepare_s:.1f} s, then readyok {after.readyok_s * 1000:.0f} ms;"
        f" imported before usiok: {', '.join(heavy) or 'neither torch nor onnxruntime'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
