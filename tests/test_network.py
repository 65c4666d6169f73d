import math

import numpy as np
import pytest
import torch

from engine.errors import UserError
from engine.features import features_from_boards
from engine.network import (
    PRESETS,
    NetworkConfig,
    WithSigmoid,
    build,
    config_from_state_dict,
    eval_to_value,
    load_model,
    preset,
    read_checkpoint,
    save_checkpoint,
    value_to_eval,
)

# dlshogi's policy_value_resnet parameter names: our state dicts must use exactly these.
DLSHOGI_KEYS = {
    "l1_1_1.weight",
    "l1_1_2.weight",
    "l1_2.weight",
    "norm1.weight",
    "norm1.bias",
    "policy_conv.weight",
    "policy_bias.bias",
    "value_conv1.weight",
    "value_norm1.weight",
    "value_fc1.weight",
    "value_fc1.bias",
    "value_fc2.weight",
    "value_fc2.bias",
    "blocks.0.conv1.weight",
    "blocks.0.bn1.running_mean",
    "blocks.0.conv2.weight",
    "blocks.0.bn2.weight",
}


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_forward_shapes_on_real_positions(name, positions):
    net = build(preset(name), seed=0).eval()
    x1, x2 = features_from_boards(positions[:8])
    policy, value = net(torch.from_numpy(x1), torch.from_numpy(x2))
    assert policy.shape == (8, 2187) and value.shape == (8, 1)
    _, prob = WithSigmoid(net)(torch.from_numpy(x1), torch.from_numpy(x2))
    assert ((prob > 0) & (prob < 1)).all()
    torch.testing.assert_close(prob, torch.sigmoid(value))


def test_dlshogi_structure_and_presets():
    net = build(PRESETS["resnet10"])
    keys = set(net.state_dict())
    assert DLSHOGI_KEYS <= keys
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


def test_dlshogi_checkpoints_load_without_config(tmp_path):
    net = build(preset("tiny"), seed=1)
    torch.save({"model": net.state_dict(), "optimizer": {}}, tmp_path / "dlshogi.pt")
    torch.save(net.state_dict(), tmp_path / "bare.pt")
    for name in ("dlshogi.pt", "bare.pt"):
        cfg = load_model(tmp_path / name).config
        assert (cfg.blocks, cfg.channels, cfg.fcl, cfg.input2) == (2, 32, 32, 57)


def test_bad_checkpoints_are_one_line_errors(tmp_path):
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint at all")
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save({"something": torch.zeros(1)}, tmp_path / "other.pt")
    torch.save({"model": {"l1_1_1.weight": torch.zeros(3)}}, tmp_path / "broken.pt")
    for name, pattern in [
        ("missing.pt", "not found"),
        ("garbage.pt", "not a loadable checkpoint"),
        ("empty.pt", "not a loadable checkpoint"),
        ("other.pt", "no policy-value network"),
        ("broken.pt", "do not match"),
    ]:
        with pytest.raises(UserError, match=pattern) as e:
            load_model(tmp_path / name)
        assert "\n" not in str(e.value) and name in str(e.value)
    with pytest.raises(UserError):
        read_checkpoint(tmp_path)


def test_eval_scale_matches_dlshogi():
    assert value_to_eval(0.5) == 0
    assert value_to_eval(1 / (1 + math.exp(-1))) == 756
    assert value_to_eval(1.0) > 10000 and value_to_eval(0.0) < -10000
    for e in (-2000, -100, 0, 300, 1500):
        assert abs(value_to_eval(eval_to_value(e)) - e) <= 1
    assert np.isclose(eval_to_value(756), 1 / (1 + math.exp(-1)))
