import math

import numpy as np
import pytest
import torch
from torch import nn

from engine.core.features import features_from_boards
from engine.core.network import (
    LEGACY_BN_EPS,
    PRESETS,
    NetworkConfig,
    WithSigmoid,
    build,
    config_from_state_dict,
    load_model,
    preset,
    read_checkpoint,
    save_checkpoint,
)
from engine.core.score import eval_to_value, value_to_eval
from engine.errors import UserError


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_forward_shapes_on_real_positions(name, positions):
    net = build(preset(name), seed=0).eval()
    x1, x2 = features_from_boards(positions[:8])
    policy, value = net(torch.from_numpy(x1), torch.from_numpy(x2))
    assert policy.shape == (8, 2187) and value.shape == (8, 1)
    _, prob = WithSigmoid(net)(torch.from_numpy(x1), torch.from_numpy(x2))
    assert ((prob > 0) & (prob < 1)).all()
    torch.testing.assert_close(prob, torch.sigmoid(value))


def test_presets():
    """(Names and shapes are checked against dlshogi's own files in test_dlshogi_interop.py.)"""
    net = build(PRESETS["resnet10"])
    keys = set(net.state_dict())
    assert len({k.split(".")[1] for k in keys if k.startswith("blocks.")}) == 10
    assert net.state_dict()["l1_1_1.weight"].shape == (192, 62, 3, 3)
    assert net.state_dict()["value_fc1.weight"].shape == (256, 2187)
    assert net.state_dict()["policy_bias.bias"].shape == (2187,)
    assert (PRESETS["tiny"].blocks, PRESETS["tiny"].channels) == (2, 32)
    assert (PRESETS["small"].blocks, PRESETS["small"].channels) == (5, 64)
    with pytest.raises(UserError, match="unknown network preset"):
        preset("huge")


def test_checkpoint_records_its_architecture(tmp_path, positions):
    net = build(preset("tiny", activation="relu", fcl=48), seed=3).eval()
    path = tmp_path / "m.pt"
    save_checkpoint(path, net, step=7)
    payload = torch.load(path, weights_only=True)
    assert payload["step"] == 7 and payload["config"]["fcl"] == 48
    loaded = load_model(path)
    assert loaded.config == net.config
    x1, x2 = (torch.from_numpy(a) for a in features_from_boards(positions[:4]))
    torch.testing.assert_close(loaded(x1, x2), net(x1, x2))


def test_nyugyoku_network_takes_119_planes():
    net = build(NetworkConfig(blocks=1, channels=16, fcl=16, input2=119)).eval()
    policy, _ = net(torch.zeros(2, 62, 9, 9), torch.zeros(2, 119, 9, 9))
    assert policy.shape == (2, 2187)
    assert config_from_state_dict(net.state_dict()).input2 == 119


def test_checkpoints_from_before_bn_eps_was_recorded_keep_their_outputs(repo, positions):
    """The default model shipped until 2026-12-01 (kept as tests/data/legacy_small.pt) predates `bn_eps`
    in the config and the `policy` name: it loads with the eps it was trained with (2e-5) and its
    `policy_conv` weights, computing what it always did."""
    path = repo / "tests" / "data" / "legacy_small.pt"
    payload = read_checkpoint(path)
    assert "bn_eps" not in payload["config"]
    net = load_model(path)
    assert net.config.bn_eps == LEGACY_BN_EPS and net.norm1.eps == LEGACY_BN_EPS
    torch.testing.assert_close(net.policy.weight, payload["model"]["policy_conv.weight"])
    x1, x2 = (torch.from_numpy(a) for a in features_from_boards(positions[:4]))
    with torch.no_grad():
        policy, _ = net(x1, x2)
        h = net.blocks(net.act(net.norm1(net.l1_1_1(x1) + net.l1_1_2(x1) + net.l1_2(x2))))
        by_hand = torch.flatten(nn.functional.conv2d(h, payload["model"]["policy_conv.weight"]), 1)
    torch.testing.assert_close(policy, by_hand + payload["model"]["policy_bias.bias"])


def test_new_networks_use_dlshogi_bn_eps():
    assert build(preset("tiny")).config.bn_eps == 1e-5
    assert all(m.eps == 1e-5 for m in build(preset("tiny")).modules() if isinstance(m, nn.BatchNorm2d))


def test_bad_checkpoints_are_one_line_errors(tmp_path):
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint at all")
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "image.pt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)  # a PNG renamed
    torch.save({"something": torch.zeros(1)}, tmp_path / "other.pt")
    torch.save({"model": {"l1_1_1.weight": torch.zeros(3)}}, tmp_path / "broken.pt")
    net = build(preset("tiny"), seed=0)
    save_checkpoint(tmp_path / "wrongconfig.pt", net)
    payload = torch.load(tmp_path / "wrongconfig.pt", weights_only=True)
    torch.save({**payload, "config": {**payload["config"], "channels": 64}}, tmp_path / "wrongconfig.pt")
    torch.save({**payload, "config": {**payload["config"], "depth": 3}}, tmp_path / "oddconfig.pt")
    torch.save({**payload, "numbers": np.zeros(3)}, tmp_path / "pickled.pt")  # needs unpickling code
    for name, pattern in [
        ("missing.pt", "not found"),
        ("garbage.pt", "not a checkpoint \\(not a PyTorch file\\)"),
        ("empty.pt", "not a checkpoint \\(empty file\\)"),
        ("image.pt", "not a checkpoint \\(not a PyTorch file\\)"),
        ("other.pt", "no policy-value network"),
        ("broken.pt", "not a dlshogi ResNet"),
        ("wrongconfig.pt", r"do not match its config .*: l1_1_1.weight is \[32, 62, 3, 3\], expected \[64, "),
        ("oddconfig.pt", "config is not a network config"),
        ("pickled.pt", r"holds Python objects, not just tensors \(numpy"),
    ]:
        with pytest.raises(UserError, match=pattern) as e:
            load_model(tmp_path / name)
        assert "\n" not in str(e.value) and name in str(e.value)
        assert "weights_only" not in str(e.value)
    with pytest.raises(UserError):
        read_checkpoint(tmp_path)


def test_eval_scale_matches_dlshogi():
    assert value_to_eval(0.5) == 0
    assert value_to_eval(1 / (1 + math.exp(-1))) == 756
    assert value_to_eval(1.0) > 10000 and value_to_eval(0.0) < -10000
    for e in (-2000, -100, 0, 300, 1500):
        assert abs(value_to_eval(eval_to_value(e)) - e) <= 1
    assert np.isclose(eval_to_value(756), 1 / (1 + math.exp(-1)))
