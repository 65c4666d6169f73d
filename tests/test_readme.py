"""The README's first hour, run the way a new user runs it: the Quick start's main job and then its
training command, each in a new shell from a folder laid out like the checkout, read from README.md
itself (so the test follows the README when it changes). Only the self-play run is made smaller."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETUP = ("python3 -m venv", ". .venv/bin/activate", "pip install", "bin/usi_engine --prepare")
SMALLER = {"--games": "2", "--parallel": "2", "--sims": "8"}
README_TEXT = (REPO / "README.md").read_text()


def quick_start_commands() -> list[str]:
    """The commands of the Quick start's bash blocks in order, less the set-up steps (the engine's
    --prepare has its own tests) and the test run."""
    section = README_TEXT.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.strip().splitlines():
            commands += [c.strip() for c in line.split("&&") if not c.strip().startswith(SETUP)]
    return [c for c in commands if "pytest" not in c]


def smaller(command: str) -> str:
    for flag, value in SMALLER.items():
        command = re.sub(rf"{flag} \d+", f"{flag} {value}", command)
    return command + " --max-moves 24" if command.startswith("bin/selfplay") else command


def run_in_new_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_quick_start_then_its_training_command_run_as_written(tmp_path: Path):
    for folder in ("bin", "models"):
        (tmp_path / folder).symlink_to(REPO / folder)
    commands = quick_start_commands()
    assert [c.split()[0] for c in commands] == ["bin/selfplay", "bin/convert", "bin/train"], commands
    for command in map(smaller, commands):
        done = run_in_new_shell(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["finished"] and summary["test_positions"] == 1842
    run = tmp_path / "runs" / "train1"
    assert {"model.pt", "checkpoint.pt", "metrics.jsonl", "metrics.png"} <= {p.name for p in run.iterdir()}
    assert "batch size" in done.stderr  # the README tells the user to expect this line
