"""Several devices in one host: an inference server per device with the search processes dealt to them
(a latency model stands in for each device), and the TensorRT cache shared by their builders: keyed by
the GPU's name and compute capability, built once under a file lock however many processes ask."""

from __future__ import annotations

import functools
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from engine.backends.evaluator import LatencyModelEvaluator
from engine.backends.trt_build import build_once, engine_cache_key, find_engine
from engine.errors import UserError
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.config import SelfPlayConfig, parse_devices
from engine.selfplay.processes import run_selfplay

pytestmark = pytest.mark.timeout(180)


def test_rows_reach_every_device_and_games_are_whole(tmp_path):
    out = tmp_path / "out"
    config = SelfPlayConfig(
        out_dir=out, games=6, parallel=3, sims=4, considered=4, max_moves=12, processes=2,
        devices=["cpu", "cpu"], threads=1, progress=False,
    )  # fmt: skip
    device = functools.partial(LatencyModelEvaluator, a_ms=0.5, b_ms=0.0)
    stats = run_selfplay(config, shared_evaluator=device)
    assert stats.games == 6
    assert [s["device"] for s in stats.servers] == ["cpu#0", "cpu#1"]
    assert all(s["rows"] > 0 and s["calls"] > 0 for s in stats.servers)  # each device served rows
    assert sum(s["rows"] for s in stats.servers) == stats.nn_positions
    assert "cpu#0" in stats.summary() and "cpu#1" in stats.summary()
    games = [g for f in out.glob("*.hcpe3") for g in iter_hcpe3_games(f)]
    assert len(games) == 6 and sum(len(g.moves) for g in games) == stats.positions


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"devices": ["cuda:0", "cuda:1"], "processes": 1}, "2 devices need --processes >= 2"),
        ({"devices": ["cuda:0"], "device": "cuda"}, "--device and --devices"),
        ({"devices": ["cuda:0"], "inference_server": "off"}, "--devices serves each device"),
    ],
)
def test_device_settings_that_cannot_work_are_refused(tmp_path, kw, message):
    with pytest.raises(UserError, match=message):
        SelfPlayConfig(out_dir=tmp_path, **kw).validate()


def test_device_lists_parse():
    assert parse_devices("cuda:0, cuda:1") == ["cuda:0", "cuda:1"]
    assert parse_devices(None) == [] and parse_devices("") == []
    with pytest.raises(UserError, match="'gpu1' is not a device"):
        parse_devices("cuda:0,gpu1")


KEY = engine_cache_key("ab" * 32, "NVIDIA H200 sm90", "10.3.0", 64, "fp16", "fp16-flag")


def _slow_build(marker_dir: Path) -> bytes:
    """A stand-in for TensorRT's build: slow, and it leaves one marker per build."""
    (marker_dir / f"built-{time.monotonic_ns()}").touch()
    time.sleep(1.0)
    return b"engine bytes"


def _builder(out: str, markers: str, results) -> None:
    path = build_once(Path(out), KEY, functools.partial(_slow_build, Path(markers)), log=lambda _: None)
    results.put(str(path))


def test_concurrent_builders_of_one_engine_build_it_once(tmp_path):
    out, markers = tmp_path / "cache", tmp_path / "markers"
    markers.mkdir()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_builder, args=(str(out), str(markers), results)) for _ in range(3)]
    for p in procs:
        p.start()
    paths = {results.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(30)
    assert len(list(markers.iterdir())) == 1  # the others waited and loaded it
    assert paths == {str(find_engine(out, KEY))}
    assert Path(paths.pop()).read_bytes() == b"engine bytes"


def test_the_engine_key_names_the_compute_capability():
    other = engine_cache_key("ab" * 32, "NVIDIA H200 sm80", "10.3.0", 64, "fp16", "fp16-flag")
    from engine.backends.trt_build import engine_file_name

    assert "sm90" in engine_file_name(KEY) and engine_file_name(other) != engine_file_name(KEY)
