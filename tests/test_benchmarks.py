"""bench/ as a user reads it: docs/benchmarks.md lists exactly the scripts bench/ holds; every script the
documentation names (a benchmark, or a lab-notebook driver beside its entry) is where it says and the
drivers still start from there; bench/nps.py times the engine's own search next to the network's rows/s."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import doc_files

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
# a script path as the docs write it, from the repository root: bench/x.py, docs/experiments/ENTRY/x.py
SCRIPT = re.compile(r"(?<![\w/.-])((?:bench|docs/experiments/[\w.-]+)/[\w.-]+\.(?:py|sh))\b")
DRIVERS = sorted((REPO / "docs" / "experiments").glob("*/*.py"))


def test_benchmarks_md_lists_exactly_what_bench_holds():
    text = (REPO / "docs" / "benchmarks.md").read_text()
    named = {path.removeprefix("bench/") for path in SCRIPT.findall(text) if path.startswith("bench/")}
    held = {p.name for p in BENCH.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert {"not listed": sorted(held - named), "listed, not there": sorted(named - held)} == {
        "not listed": [],
        "listed, not there": [],
    }


def test_every_script_the_docs_name_is_where_they_say():
    """A command in the docs or the lab notebook that names a moved or deleted script fails here."""
    missing = [
        f"{doc.relative_to(REPO)}: {path}"
        for doc in doc_files()
        for path in SCRIPT.findall(doc.read_text())
        if not (REPO / path).is_file()
    ]
    assert missing == []


@pytest.mark.parametrize("driver", DRIVERS, ids=[p.name for p in DRIVERS])
def test_a_lab_notebook_driver_starts_from_beside_its_entry(driver, tmp_path):
    out = subprocess.run(
        [sys.executable, str(driver), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr[-2000:]


def test_nps_times_the_engines_search_against_the_networks_rows(tiny_model, tmp_path):
    """One line a measure at each batch: the network's rows/s (100 %), the engine's FastSearch and the
    reference Search, each with its playouts/s and share at both positions."""
    argv = [sys.executable, str(BENCH / "nps.py"), "--model", str(tiny_model), "--backends", "torch"]
    argv += ["--batches", "4", "--seconds", "0.2", "--threads", "1"]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {}
    for line in out.stdout.splitlines():
        if m := re.fullmatch(r"\s+4  (.+?)\s+(\d+)\s+(\d+)%\s+(\d+)\s+(\d+)%", line):
            rows[m.group(1)] = [int(x) for x in m.group(2, 3, 4, 5)]
    assert list(rows) == ["network rows/s", "engine (FastSearch)", "reference (Search)"], out.stdout
    assert rows["network rows/s"][1::2] == [100, 100]
    assert all(rate > 0 for figures in rows.values() for rate in figures[0::2])
