"""A refused run of any bin/ command says why in one line, exits 2, draws no progress bar and leaves no
file or folder behind:
every argument and path is checked before the work starts, and what a run made before it found a
problem (a cache, a run folder) goes again. Each command runs in an empty folder, its outputs inside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.test_console import BAR
from train.data import synthetic

REPO = Path(__file__).resolve().parent.parent
NOWHERE = "/nonexistent/engine"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("records")
    synthetic.write_hcpe(folder / "small.hcpe", 200, seed=1)
    synthetic.write_hcpe3(folder / "games.hcpe3", 3, seed=2)
    return folder


def refused(records: Path) -> dict[str, list[str]]:
    """A refused call of every command: a missing or wrong input, or data found too small after work."""
    hcpe, hcpe3 = str(records / "small.hcpe"), str(records / "games.hcpe3")
    return {
        "train missing --test": ["train", "--data", hcpe3, "--test", "nothere.hcpe", "--out", "run"],
        "train missing --data": ["train", "--data", "nothere", "--out", "run"],
        "train batch over the data": ["train", "--data", hcpe3, "--out", "runs/a/b", "--batch-size", "4096"],
        "train bad --init": ["train", "--data", hcpe, "--out", "run", "--init", str(REPO / "README.md")],
        "selfplay bad --model": [
            "selfplay",
            "--model",
            str(REPO / "README.md"),
            "--out",
            "sp",
            "--games",
            "2",
        ],
        "selfplay missing engine": ["selfplay", "--usi-engine", NOWHERE, "--out", "sp", "--games", "2"],
        "convert missing input": ["convert", "csa-to-hcpe", "nothere.csa", "-o", "out/o.hcpe"],
        "convert wrong input": ["convert", "hcpe3-cache", hcpe, "-o", "out/o.cache"],
        "corpus missing engine": ["corpus", "corpus", "--engine1", NOWHERE, "--games", "2"],
        "match missing engine": ["match", NOWHERE, str(REPO / "bin" / "greedy_usi"), "--csa", "games"],
        "loop bad --init": ["loop", "--dir", "loop", "--init", str(REPO / "README.md"), "--generations", "1"],
        "distill bad --model": [
            "distill",
            "out/d.hcpe3",
            "--games",
            "1",
            "--teacher",
            str(REPO / "README.md"),
        ],
        "rescore missing input": ["rescore", "nothere.hcpe", "--out", "out/r.hcpe", "--engine", NOWHERE],
        "rescore missing engine": ["rescore", hcpe, "--out", "out/r.hcpe", "--engine", NOWHERE],
    }


CASES = list(refused(Path("records")))
FOUND_AFTER_WORK = {"train batch over the data"}  # its bar shows the cache built to count the positions


@pytest.mark.parametrize("case", CASES)
def test_a_refused_run_says_why_and_leaves_nothing(case: str, records: Path, tmp_path: Path):
    command, *args = refused(records)[case]
    done = subprocess.run(
        [str(REPO / "bin" / command), *args], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert lines and lines[-1].startswith(f"{command}: error: "), done.stderr
    assert "Traceback" not in done.stderr
    if case not in FOUND_AFTER_WORK:
        assert not BAR.search(done.stderr), "a progress bar drawn before the refusal"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], done.stderr
