"""dlshogi interop, proven on files DeepLearningShogi's own code made (../shared/interop/dlshogi/, see its
README): each loads here and computes dlshogi's outputs; what we write loads the way dlshogi reads it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import cshogi
import numpy as np
import onnx
import pytest
import torch

from engine.backends.choose import Platform, create_evaluator
from engine.backends.onnx_evaluator import OnnxEvaluator
from engine.backends.onnx_files import onnx_sha256, sha256_file
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.dlshogi_format import read_npz
from engine.core.moves import legal_moves_and_labels
from engine.core.network import CHECKPOINT_FORMAT, NetworkConfig, build, load_model, save_dlshogi
from engine.errors import UserError
from export.onnx_export import export_onnx
from train.data import synthetic

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "interop" / "dlshogi"
ENGINE = REPO / "bin" / "usi_engine"
CPU = Platform(cuda=False, tensorrt=False, ort_providers=("CPUExecutionProvider",))
POLICY_TOL, VALUE_TOL = 1e-3, 1e-4

pytestmark = [
    pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"dlshogi fixtures absent ({FIXTURES})"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

# every model file of the folder: (file, its reference.npz entry, activation to pass or None)
MODELS = {
    "train-r5x64s-001.pth": ("train-r5x64s", "swish"),  # trainer checkpoint, resnet5x64_fcl128_swish
    "train-r5x64s.npz": ("train-r5x64s", "swish"),  # --model npz file of the same net
    "train-r5x64s-legacy.onnx": ("train-r5x64s", None),  # single-file ONNX
    "train-r5x64s.onnx": ("train-r5x64s", None),  # ONNX + train-r5x64s.onnx.data
    "r10s-calib.pth": ("r10s-calib", None),  # resnet10_swish: fixed names say swish
}
CASES = [(f, b) for f in MODELS for b in (("onnx",) if f.endswith(".onnx") else ("onnx", "torch"))]


@pytest.fixture(scope="module")
def boards() -> list[cshogi.Board]:
    out = []
    for line in (FIXTURES / "positions.sfen").read_text().splitlines():
        board = cshogi.Board()
        board.set_sfen(line.strip())
        out.append(board)
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "reference.npz") as z:
        return {k: z[k] for k in z.files}


def assert_matches(got: tuple[np.ndarray, np.ndarray], reference: dict, name: str) -> None:
    policy, value = got
    assert np.abs(policy - reference[f"{name}.policy"]).max() <= POLICY_TOL
    assert np.abs(value - reference[f"{name}.value"]).max() <= VALUE_TOL


def test_every_model_file_is_covered():
    files = {p.name for p in FIXTURES.iterdir() if p.suffix in (".pth", ".pt", ".npz", ".onnx")}
    assert files - {"reference.npz"} == set(MODELS)


@pytest.mark.parametrize("name,backend", CASES)
def test_create_evaluator_matches_dlshogi(name, backend, boards, reference, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the .onnx.data must be found beside the model, not in the cwd
    ref_name, activation = MODELS[name]
    lines: list[str] = []
    with create_evaluator(
        FIXTURES / name, backend, max_batch=64, log=lines.append, platform=CPU, activation=activation,
        engine_dir=tmp_path / "cache",
    ) as ev:  # fmt: skip
        assert ev.name.startswith(backend)
        assert_matches(ev.evaluate_boards(boards), reference, ref_name)
    assert len(lines) == 1 and str(FIXTURES / name) in lines[0]


def test_our_network_is_dlshogis_generic_resnet():
    """Same parameter names and shapes as dlshogi's resnet5x64_fcl128_swish, and its BatchNorm eps."""
    theirs = torch.load(FIXTURES / "train-r5x64s-001.pth", weights_only=True)["model"]
    ours = build(NetworkConfig(blocks=5, channels=64, fcl=128)).state_dict()
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    assert load_model(FIXTURES / "r10s-calib.pth").norm1.eps == 1e-5


def test_activation_is_never_guessed(tmp_path, boards, reference):
    for name in ("train-r5x64s-001.pth", "train-r5x64s.npz"):
        with pytest.raises(UserError, match="does not record its activation; pass --activation") as e:
            load_model(FIXTURES / name)
        assert "\n" not in str(e.value) and name in str(e.value)
    # a dlshogi network name in the file name says it, as in dlshogi's --network
    named = tmp_path / "resnet5x64_fcl128_swish-epoch1.pth"
    shutil.copy(FIXTURES / "train-r5x64s-001.pth", named)
    assert load_model(named).config.activation == "swish"
    relu = tmp_path / "resnet5x64_fcl128_relu.pth"
    shutil.copy(named, relu)
    assert load_model(relu).config.activation == "relu"
    # the option decides, and it matters: the same weights as relu are another network
    with TorchEvaluator(load_model(FIXTURES / "train-r5x64s-001.pth", "relu"), max_batch=64) as ev:
        policy, _ = ev.evaluate_boards(boards)
    assert np.abs(policy - reference["train-r5x64s.policy"]).max() > 0.1
    with pytest.raises(UserError, match="always swish"):
        load_model(FIXTURES / "r10s-calib.pth", "relu")


def test_bare_state_dict_loads(tmp_path, boards, reference):
    state = torch.load(FIXTURES / "r10s-calib.pth", weights_only=True)["model"]
    torch.save(state, tmp_path / "bare.pth")
    with TorchEvaluator(load_model(tmp_path / "bare.pth"), max_batch=64) as ev:
        assert_matches(ev.evaluate_boards(boards), reference, "r10s-calib")


def expected_moves(boards: list[cshogi.Board], policy: np.ndarray) -> dict[int, str]:
    """The policy's best legal move per position, where it is clear (top two logits > 1e-3 apart)."""
    out = {}
    for i, board in enumerate(boards):
        if board.is_game_over() or board.is_nyugyoku():
            continue
        moves, labels = legal_moves_and_labels(board)
        logits = policy[i][labels]
        top = np.sort(logits)[-2:]
        if len(logits) == 1 or top[1] - top[0] > 1e-3:
            out[i] = cshogi.move_to_usi(int(moves[int(np.argmax(logits))]))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_usi_engine_plays_dlshogis_policy(name, boards, reference, tmp_path):
    """bin/usi_engine started from another folder, DNN_Model set to the dlshogi file: in policy mode it
    plays the reference policy's best legal move on every position."""
    ref_name, activation = MODELS[name]
    want = expected_moves(boards, reference[f"{ref_name}.policy"])
    assert len(want) >= 40
    script = [f"setoption name DNN_Model value {FIXTURES / name}", "setoption name Search_Mode value policy",
              "setoption name Mate_Root_Search value 0", "setoption name DNN_Batch_Size value 4",
              "setoption name CPU_Int8 value false", "setoption name USI_OwnBook value false"]  # fmt: skip
    # (fp32: exactly dlshogi's numbers, not the int8 model's)
    if activation:
        script.append(f"setoption name DNN_Activation value {activation}")
    script.append("isready")
    for i in want:
        script += [f"position sfen {boards[i].sfen()}", "go byoyomi 1000"]
    env = {**os.environ, "GUMBEL_SHOGI_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(ENGINE)], input="\n".join([*script, "quit"]) + "\n", capture_output=True,
        text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert "error" not in proc.stdout and "Traceback" not in proc.stderr, proc.stdout[-2000:]
    played = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("bestmove")]
    assert played == list(want.values())


def test_a_missing_activation_is_one_error_line_in_the_engine(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ENGINE)],
        input=f"setoption name DNN_Model value {FIXTURES / 'train-r5x64s.npz'}\nisready\nquit\n",
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "GUMBEL_SHOGI_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    errors = [line for line in proc.stdout.splitlines() if line.startswith("info string error")]
    assert len(errors) == 1 and "DNN_Activation" in errors[0] and "train-r5x64s.npz" in errors[0]


def interface(model: onnx.ModelProto) -> list:
    def dims(t: onnx.ValueInfoProto) -> list:
        return [d.dim_param or d.dim_value for d in t.type.tensor_type.shape.dim]

    tensors = [*model.graph.input, *model.graph.output]
    return [(t.name, t.type.tensor_type.elem_type, dims(t)) for t in tensors]


def test_our_onnx_has_dlshogis_interface(tmp_path):
    """Inputs, outputs, element types and the dynamic batch axis are those of dlshogi's own export."""
    net = load_model(FIXTURES / "train-r5x64s-001.pth", "swish")
    report = export_onnx(net, tmp_path / "ours.onnx", positions=8)
    assert report.ok
    for theirs in ("train-r5x64s-legacy.onnx", "train-r5x64s.onnx"):
        assert interface(onnx.load(str(report.path))) == interface(
            onnx.load(str(FIXTURES / theirs), load_external_data=False)
        )


@pytest.mark.parametrize("suffix", [".pth", ".npz"])
def test_saved_for_dlshogi_has_its_names_and_reloads(suffix, tmp_path, boards, reference):
    net = load_model(FIXTURES / "train-r5x64s.npz", "swish")
    out = tmp_path / f"resnet5x64_fcl128_swish{suffix}"
    assert save_dlshogi(out, net) == "resnet5x64_fcl128_swish"
    if suffix == ".npz":
        with np.load(out) as ours, np.load(FIXTURES / "train-r5x64s.npz") as theirs:
            assert {k: ours[k].shape for k in ours.files} == {k: theirs[k].shape for k in theirs.files}
    else:
        theirs = torch.load(FIXTURES / "train-r5x64s-001.pth", weights_only=True)["model"]
        ours = torch.load(out, weights_only=True)
        assert (ours["epoch"], ours["t"]) == (0, 0)  # what dlshogi's train.py --resume reads
        assert {k: v.shape for k, v in ours["model"].items()} == {k: v.shape for k, v in theirs.items()}
    with TorchEvaluator(load_model(out), max_batch=64) as ev:  # activation from the name it was given
        assert_matches(ev.evaluate_boards(boards), reference, "train-r5x64s")


def test_resnet10_swish_round_trips_under_its_fixed_names(tmp_path, boards, reference):
    net = load_model(FIXTURES / "r10s-calib.pth")
    out = tmp_path / "r10.pth"
    assert save_dlshogi(out, net, resnet10_swish=True) == "resnet10_swish"
    theirs = torch.load(FIXTURES / "r10s-calib.pth", weights_only=True)["model"]
    assert {k: v.shape for k, v in torch.load(out, weights_only=True)["model"].items()} == {
        k: v.shape for k, v in theirs.items()
    }
    with TorchEvaluator(load_model(out), max_batch=64) as ev:
        assert_matches(ev.evaluate_boards(boards), reference, "r10s-calib")
    small = load_model(FIXTURES / "train-r5x64s.npz", "swish")
    with pytest.raises(UserError, match="resnet10_swish"):
        save_dlshogi(tmp_path / "x.pth", small, resnet10_swish=True)


def test_our_legacy_eps_survives_the_move_to_dlshogi(tmp_path, boards):
    """A checkpoint of ours written before bn_eps was recorded (BatchNorm eps 2e-5, as the models shipped
    until 2026-12-04) written for dlshogi (eps 1e-5) computes the same outputs: the eps difference is
    folded into the running variances."""
    net = build(NetworkConfig(blocks=2, channels=32, fcl=32, bn_eps=2e-5), seed=0)
    generator = torch.Generator().manual_seed(1)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):  # small variances, where the eps shows (gain ~1)
            module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) * 1e-3 + 1e-4)
            module.weight.data.copy_(module.running_var.sqrt())
    config = {k: v for k, v in asdict(net.config).items() if k != "bn_eps"}
    state = {"format": CHECKPOINT_FORMAT, "config": config, "model": net.state_dict()}
    legacy = tmp_path / "legacy.pt"
    torch.save(state, legacy)
    ours = load_model(legacy)
    assert ours.config.bn_eps == 2e-5
    out = tmp_path / f"model_{ours.config.activation}.npz"
    save_dlshogi(out, ours)
    moved = load_model(out)
    assert moved.config.bn_eps == 1e-5
    with TorchEvaluator(ours, max_batch=64) as a, TorchEvaluator(moved, max_batch=64) as b:
        (pa, va), (pb, vb) = a.evaluate_boards(boards), b.evaluate_boards(boards)
    assert np.abs(pa - pb).max() < 1e-4 and np.abs(va - vb).max() < 1e-6
    assert read_npz(out)["norm1.running_var"].shape == (ours.config.channels,)


def test_fine_tune_a_dlshogi_checkpoint_then_export_round_trips(tmp_path, boards):
    """bin/train --init dlshogi.pth --activation swish --save-dlshogi: trains it, writes our model.pt and
    a dlshogi checkpoint of the same weights; our ONNX export of it agrees with the torch model."""
    data = tmp_path / "train.hcpe"
    synthetic.write_hcpe(data, 256, seed=0)
    run, back = tmp_path / "run", tmp_path / "back.pth"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / "train"), "--data", str(data), "--out", str(run), "--init",
         str(FIXTURES / "train-r5x64s-001.pth"), "--activation", "swish", "--batch-size", "64",
         "--lr", "0.001", "--workers", "0", "--no-progress", "--save-dlshogi", str(back), "--device", "cpu"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dlshogi --network resnet5x64_fcl128_swish" in proc.stderr
    tuned = load_model(run / "model.pt")
    start = load_model(FIXTURES / "train-r5x64s-001.pth", "swish")
    assert (tuned.config.blocks, tuned.config.channels, tuned.config.fcl) == (5, 64, 128)
    assert tuned.config.activation == "swish" and tuned.config.bn_eps == 1e-5
    assert not torch.equal(tuned.policy.weight, start.policy.weight)
    back_net = load_model(back, "swish")
    for key, value in tuned.state_dict().items():
        torch.testing.assert_close(back_net.state_dict()[key], value)
    report = export_onnx(run / "model.pt", tmp_path / "tuned.onnx", positions=16)
    assert report.ok
    with OnnxEvaluator(report.path, max_batch=64) as ev, TorchEvaluator(tuned, max_batch=64) as ref:
        (p1, v1), (p2, v2) = ev.evaluate_boards(boards), ref.evaluate_boards(boards)
    assert np.abs(p1 - p2).max() <= POLICY_TOL and np.abs(v1 - v2).max() <= VALUE_TOL


def test_engine_cache_key_covers_external_weights(tmp_path):
    """Two exports can share a graph file but not weights: the TensorRT cache key must tell them apart."""
    for name in ("train-r5x64s.onnx", "train-r5x64s.onnx.data"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    model = tmp_path / "train-r5x64s.onnx"
    before, graph = onnx_sha256(model), sha256_file(model)
    data = bytearray((tmp_path / "train-r5x64s.onnx.data").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "train-r5x64s.onnx.data").write_bytes(bytes(data))
    assert sha256_file(model) == graph and onnx_sha256(model) != before


def test_train_cli_converts_without_training(tmp_path, boards, reference):
    def run(*args):
        return subprocess.run(
            [sys.executable, str(REPO / "bin" / "train"), *map(str, args)],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
        )  # fmt: skip

    proc = run("--init", FIXTURES / "r10s-calib.pth", "--save-dlshogi", tmp_path / "r10.npz")
    assert proc.returncode == 0, proc.stderr
    assert "dlshogi --network resnet10x192_fcl256_swish" in proc.stderr
    with TorchEvaluator(load_model(tmp_path / "r10.npz", "swish"), max_batch=64) as ev:
        assert_matches(ev.evaluate_boards(boards), reference, "r10s-calib")
    (tmp_path / "afile").write_text("")  # a destination under a file can never be written
    for args in (
        ["--save-dlshogi", tmp_path / "x.pth"],
        ["--init", FIXTURES / "r10s-calib.pth", "--save-dlshogi", tmp_path / "afile" / "x.pth"],
    ):
        proc = run(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("train: error:"), proc.stderr


def test_selfplay_runs_a_dlshogi_npz_given_its_activation(tmp_path, monkeypatch):
    from engine.selfplay.config import SelfPlayConfig
    from engine.selfplay.processes import run_selfplay

    monkeypatch.setenv("GUMBEL_SHOGI_CACHE", str(tmp_path / "cache"))
    config = dict(games=1, parallel=1, sims=4, max_moves=12, backend="onnx", progress=False)
    npz = str(FIXTURES / "train-r5x64s.npz")
    with pytest.raises(UserError, match="activation"):
        run_selfplay(SelfPlayConfig(out_dir=str(tmp_path / "a"), model=npz, **config))
    stats = run_selfplay(SelfPlayConfig(out_dir=str(tmp_path / "b"), model=npz, activation="swish", **config))
    assert stats.games == 1 and list((tmp_path / "b").glob("*.hcpe3"))
