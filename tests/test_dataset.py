import os

import cshogi
import numpy as np
import pytest
import torch

from engine.core.features import features_from_boards, features_from_hcps
from engine.core.moves import labels_from_move16, legal_moves_and_labels, mirror_label_permutation
from engine.core.score import eval_to_value
from engine.errors import UserError
from tests.test_features import mirrored_board
from train.data import synthetic
from train.data.dataset import (
    Batch,
    BatchDataset,
    Corpus,
    EpochBatches,
    SequentialBatches,
    hcp_turns,
    make_loader,
    mirror_batch,
    newest_files,
    open_corpus,
    plan_sources,
    resolve_inputs,
)
from train.data.hcpe3_cache import Hcpe3Cache, build_hcpe3_cache, result_for_turn
from train.data.readers import read_data, read_hcpe


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    synthetic.write_hcpe(d / "a.hcpe", 300, seed=1)
    synthetic.write_data(d / "b.data", 200, seed=2)
    cache = d / "c.cache"
    synthetic.write_hcpe3(d / "c.hcpe3", 6, seed=3)
    build_hcpe3_cache([d / "c.hcpe3"], cache)
    return d


def corpus_of(*paths) -> Corpus:
    direct, hcpe3 = plan_sources(list(paths))
    assert not hcpe3
    return open_corpus(direct, [], 57)


def test_hcpe_batch_targets(files):
    path = files / "a.hcpe"
    rec = np.array(read_hcpe(path))
    idx = np.array([0, 5, 17, 299])
    batch = corpus_of(path).gather(idx)
    x1, x2 = features_from_hcps(rec["hcp"][idx])
    np.testing.assert_array_equal(batch.x1, x1)
    np.testing.assert_array_equal(batch.x2, x2)
    board = cshogi.Board()
    for row, i in enumerate(idx):
        board.set_hcp(rec["hcp"][i])
        label = labels_from_move16(rec["bestMove16"][i], board.turn)
        assert batch.policy[row].sum() == 1 and batch.policy[row, label] == 1
        assert batch.result[row] == result_for_turn(int(rec["gameResult"][i]), board.turn)
        assert batch.value[row] == pytest.approx(float(eval_to_value(rec["eval"][i])))


def test_data_and_cache_targets(files):
    data = np.array(read_data(files / "b.data"))
    corpus = corpus_of(files / "a.hcpe", files / "b.data", files / "c.cache")
    assert len(corpus) == 300 + 200 + len(Hcpe3Cache(files / "c.cache"))
    batch = corpus.gather(np.array([310, 301, 500, 501]))  # sorted inside: 301, 310 (.data), 500, 501 (cache)
    np.testing.assert_array_equal(batch.policy[:2], data["policy"][[1, 10]])
    turns = hcp_turns(data["hcp"][[1, 10]])
    expected = [result_for_turn(int(r), int(t)) for r, t in zip(data["result"][[1, 10]], turns, strict=True)]
    np.testing.assert_array_equal(batch.result[:2], expected)
    cache = Hcpe3Cache(files / "c.cache")
    board = cshogi.Board()
    for row, i in ((2, 0), (3, 1)):
        hcp, value, result, move16s, probs = cache.entry(i)
        board.set_hcp(hcp)
        dense = np.zeros(2187, np.float32)
        dense[labels_from_move16(move16s, board.turn)] = probs
        np.testing.assert_allclose(batch.policy[row], dense, rtol=1e-6)
        assert batch.policy[row].sum() == pytest.approx(1.0, rel=1e-5)
        assert (batch.result[row], batch.value[row]) == (pytest.approx(result), pytest.approx(value))
        _, legal = legal_moves_and_labels(board)
        assert set(np.flatnonzero(batch.policy[row])) <= set(legal.tolist())


def mirror_usi(usi: str) -> str:
    def sq(s: str) -> str:
        return str(10 - int(s[0])) + s[1]

    if usi[1] == "*":
        return usi[:2] + sq(usi[2:4])
    return sq(usi[0:2]) + sq(usi[2:4]) + usi[4:]


def test_mirror_matches_mirrored_positions():
    perm = mirror_label_permutation()
    boards = list(synthetic.random_positions(40, seed=7))[::4]
    mirrored = [mirrored_board(b) for b in boards]
    # each row's policy: a distinct weight on every legal move, so the mirror must move each one right
    x1, x2 = features_from_boards(boards)
    policy, expected = (np.zeros((len(boards), 2187), np.float32) for _ in range(2))
    for row, (b, mb) in enumerate(zip(boards, mirrored, strict=True)):
        moves, labels = legal_moves_and_labels(b)
        mlabels = {cshogi.move_to_usi(m): lab for m, lab in zip(*legal_moves_and_labels(mb), strict=True)}
        for weight, (m, lab) in enumerate(zip(moves, labels, strict=True), start=1):
            assert perm[lab] == mlabels[mirror_usi(cshogi.move_to_usi(int(m)))]
            policy[row, lab] = weight
            expected[row, mlabels[mirror_usi(cshogi.move_to_usi(int(m)))]] = weight
    batch = Batch(x1, x2.copy(), policy, np.zeros(len(boards), np.float32), np.zeros(len(boards), np.float32))
    mirror_batch(batch, np.arange(len(boards)))
    y1, y2 = features_from_boards(mirrored)
    np.testing.assert_array_equal(batch.x1, y1)
    np.testing.assert_array_equal(batch.x2, y2)
    np.testing.assert_array_equal(batch.policy, expected)


def test_mirror_batch_flips_rows(files):
    corpus = corpus_of(files / "b.data")
    idx = np.arange(8)
    plain, flipped = corpus.gather(idx), corpus.gather(idx)
    mirror_batch(flipped, np.array([1, 4]))
    np.testing.assert_array_equal(flipped.x1[[1, 4]], plain.x1[[1, 4]][:, :, ::-1, :])
    np.testing.assert_array_equal(flipped.x2, plain.x2)
    np.testing.assert_array_equal(flipped.policy[[1, 4]], plain.policy[[1, 4]][:, mirror_label_permutation()])
    np.testing.assert_array_equal(flipped.x1[[0, 2, 3]], plain.x1[[0, 2, 3]])


def test_epoch_batches_shard_and_resume():
    single = EpochBatches(100, 20, seed=3, accum=2)
    single.set_epoch(1)
    chunks = [c for c, _ in single]
    assert len(chunks) == 10 and all(len(c) == 10 for c in chunks)
    seen = np.concatenate(chunks)
    assert len(np.unique(seen)) == 100
    ranks = []
    for r in range(2):
        s = EpochBatches(100, 20, seed=3, rank=r, world=2)
        s.set_epoch(1)
        ranks.append([c for c, _ in s])
    for b in range(5):  # rank r's chunk of batch b == accumulation chunk r of the single process
        np.testing.assert_array_equal(ranks[0][b], chunks[2 * b])
        np.testing.assert_array_equal(ranks[1][b], chunks[2 * b + 1])
    single.set_epoch(1, start=3)
    assert [k for _, k in single] == [(3, 1, b, c) for b in range(3, 5) for c in range(2)]
    other = EpochBatches(100, 20, seed=3)
    other.set_epoch(2)
    assert not np.array_equal(np.concatenate([c for c, _ in other]), np.sort(seen))
    with pytest.raises(UserError, match="divisible"):
        EpochBatches(100, 20, seed=0, world=3)
    with pytest.raises(UserError, match="fewer than one batch"):
        EpochBatches(10, 20, seed=0)


def test_workers_yield_the_same_batches(files):
    corpus = corpus_of(files / "a.hcpe", files / "b.data")
    ds = BatchDataset(corpus, mirror=0.5)
    sampler = EpochBatches(len(corpus), 100, seed=0)
    a = list(make_loader(ds, sampler, 0, False))
    b = list(make_loader(ds, sampler, 2, False))
    assert len(a) == len(b) == 5
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    seq = list(make_loader(BatchDataset(corpus), SequentialBatches(len(corpus), 128, limit=300), 0, False))
    assert [len(s.result) for s in seq] == [128, 128, 44]


def test_newest_files_and_inputs(tmp_path):
    for i, name in enumerate(["z.data", "a.data", "m.data"]):
        p = tmp_path / name
        p.write_bytes(b"x")
        os.utime(p, ns=(10**9 * (i + 1), 10**9 * (i + 1)))
    (tmp_path / "notes.txt").write_text("ignored")
    assert [p.name for p in newest_files(tmp_path, 2)] == ["a.data", "m.data"]
    assert [p.name for p in resolve_inputs([tmp_path])] == ["z.data", "a.data", "m.data"]
    with pytest.raises(UserError, match="no such file"):
        resolve_inputs([tmp_path / "missing.hcpe"])
    with pytest.raises(UserError, match="no record files"):
        resolve_inputs([tmp_path / "empty"] if (tmp_path / "empty").mkdir() is None else [])


def test_a_corpus_folder_with_both_formats_is_refused(tmp_path):
    """bin/corpus writes corpus.hcpe and corpus.hcpe3 of the same games: the folder would train each twice."""
    for name in ("corpus.hcpe", "corpus.hcpe3", "other.hcpe"):
        (tmp_path / name).write_bytes(b"x")
    assert len(resolve_inputs([tmp_path])) == 3  # not made by bin/corpus: the files are the user's
    (tmp_path / "corpus.json").write_text("{}")
    with pytest.raises(UserError, match="corpus.hcpe and corpus.hcpe3 hold the same games"):
        resolve_inputs([tmp_path])
    assert resolve_inputs([tmp_path / "corpus.hcpe", tmp_path / "other.hcpe"])[0].name == "corpus.hcpe"
