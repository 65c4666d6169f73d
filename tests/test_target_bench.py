"""bench/targets.py's figures: the policy and value columns on hand-made targets, and a whole run on
real engine games (the shipped held-out set) with a tiny network."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench import targets
from tests.conftest import REPO


def test_policy_columns_hand_computed():
    prior = [np.array([0.5, 0.25, 0.25]), np.array([0.5, 0.5])]
    one_hot = [np.array([0.0, 1.0, 0.0]), np.array([1.0, 0.0])]
    row = targets.policy_row(one_hot, prior, [1, None])
    assert row["max"] == 1 and row["entropy"] == 0
    assert row["kl"] == pytest.approx((math.log(4) + math.log(2)) / 2)
    assert row["differs"] == 0.5  # the first position's target moved off the prior's choice
    assert (row["agree"], row["ce"]) == (1.0, 0.0)  # judged on the first position only
    same = targets.policy_row(prior, prior, [2, 0])
    assert same["kl"] == 0 and same["differs"] == 0
    assert same["ce"] == pytest.approx((math.log(4) + math.log(2)) / 2)


def test_a_run_on_engine_games_marks_todays_default(tiny_model, capsys):
    games = REPO / "models" / "heldout" / "fsf-200k.hcpe"
    targets.main([str(games), "--judge", str(games), "--model", str(tiny_model), "--positions", "12",
                  "--sims", "8", "--settings", "mctx,0.3:absolute", "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("positions 12, judged 12, consecutive pairs ")
    assert int(out[0].split("consecutive pairs ")[1].split(";")[0]) >= 8  # engine games, in order
    assert any(line.split()[:3] == ["mctx", "8", "policy*"] for line in out)
    assert any(line.split()[:3] == ["mctx", "8", "improved*"] for line in out)
    assert any(line.split()[:3] == ["0.3:absolute", "8", "chosen"] for line in out)
    assert targets.main([str(games), "--settings", "0.3:rescaled"]) == 2
    assert "--settings: '0.3:rescaled' is neither" in capsys.readouterr().err
