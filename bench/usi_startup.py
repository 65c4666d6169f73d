#!/usr/bin/env python3
"""How long a GUI waits for bin/usi_engine: time to `usiok` after start, and to `readyok` after that
(the model load), started as a GUI starts it (the file itself, its own process). Also says whether
torch or onnxruntime was imported before `usiok` (they must not be: seconds on a loaded machine).

Usage: bench/usi_startup.py [--runs N] [--model PATH] [--backend auto|torch|onnx|trt]"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "bin" / "usi_engine"
HEAVY = ("torch", "onnxruntime")
TIMEOUT_S = 120.0


def _read_until(proc: subprocess.Popen, prefix: str) -> None:
    """Read stdout up to a line starting with `prefix`; an engine silent for TIMEOUT_S is killed."""
    timer = threading.Timer(TIMEOUT_S, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            if line.startswith(prefix):
                return
        raise RuntimeError(f"{ENGINE} ended (or hung) before {prefix!r}")
    finally:
        timer.cancel()


def one_start(options: dict[str, str]) -> tuple[float, float, list[str]]:
    """(seconds to usiok, seconds from isready to readyok, heavy modules imported before usiok)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # import log on stderr, in import order
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
        _read_until(proc, "readyok")
        to_readyok = time.monotonic() - ready_start
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    return to_usiok, to_readyok, [n for n in imports if "." not in n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default=None, help="DNN_Model (default: the engine's default)")
    ap.add_argument("--backend", default=None, help="Backend option (default: the engine's default, auto)")
    args = ap.parse_args()
    options = {k: v for k, v in (("DNN_Model", args.model), ("Backend", args.backend)) if v}
    usiok, readyok = [], []
    heavy: set[str] = set()
    for _ in range(args.runs):
        u, r, imported = one_start(options)
        usiok.append(u)
        readyok.append(r)
        heavy.update(imported)
        print(f"usiok {u * 1000:6.0f} ms   readyok {r * 1000:6.0f} ms", flush=True)
    med_u, med_r = statistics.median(usiok) * 1000, statistics.median(readyok) * 1000
    print(
        f"median of {args.runs}: usiok {med_u:.0f} ms (max {max(usiok) * 1000:.0f}),"
        f" readyok {med_r:.0f} ms (max {max(readyok) * 1000:.0f});"
        f" imported before usiok: {', '.join(sorted(heavy)) or 'neither torch nor onnxruntime'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
