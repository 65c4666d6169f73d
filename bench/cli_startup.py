#!/usr/bin/env python3
"""How long each bin/ command takes to answer `--help` and a mistyped flag, started as a user starts it
(the file itself, through bin/_launch), next to the floor: `python -c pass` under this interpreter. A
command that imports torch, numba or onnxruntime before parsing its flags shows here as seconds.

Usage: bench/cli_startup.py [--runs N] [COMMAND ...]   (default: every bin/ command)"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(__file__).resolve().parent.parent / "bin"
CASES = {"--help": ["--help"], "bad flag": ["--no-such-flag"]}
TIMEOUT_S = 120.0


def commands() -> list[str]:
    """The bin/ commands, as tests/test_bin.py finds them: not the launcher, not the Windows wrapper."""
    return sorted(p.name for p in BIN.iterdir() if not p.name.startswith("_") and p.suffix != ".bat")


def timed(argv: list[str], runs: int) -> tuple[list[float], int]:
    """Wall seconds of each of `runs` starts of argv, and the last exit status."""
    seconds, status = [], 0
    for _ in range(runs):
        start = time.monotonic()
        out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S)
        seconds.append(time.monotonic() - start)
        status = out.returncode
    return seconds, status


def row(name: str, case: str, seconds: list[float], status: int) -> str:
    return f"{name:<14} {case:<16} {statistics.median(seconds):8.3f} {max(seconds):8.3f} {status:4d}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="starts per command and case (default 5)")
    ap.add_argument("names", nargs="*", metavar="COMMAND", help="bin/ commands (default: all)")
    args = ap.parse_args()
    print(f"{'command':<14} {'case':<16} {'median s':>8} {'max s':>8} {'rc':>4}", flush=True)
    print(row("(floor)", "python -c pass", *timed([sys.executable, "-c", "pass"], args.runs)), flush=True)
    for name in args.names or commands():
        for case, extra in CASES.items():
            print(row(name, case, *timed([str(BIN / name), *extra], args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
