"""Record formats: byte layouts, round trips, cache targets, and refusal of broken or foreign files."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.core.rules import BLACK_WIN, DRAW, MAX_MOVES, NYUGYOKU, SENNICHITE, WHITE_WIN
from engine.errors import UserError
from engine.records.formats import (
    DATA,
    HCPE,
    HCPE3_HEADER,
    MOVE_INFO,
    MOVE_VISITS,
    OPPONENT_SELFPLAY,
    Hcpe3Game,
)
from engine.records.hcp_check import is_valid_hcp
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import (
    Hcpe3Writer,
    append_data,
    append_hcpe,
    encode_hcpe3_game,
    write_data,
    write_hcpe,
    write_hcpe3_games,
)
from train.data.detect import detect_format
from train.data.hcpe3_cache import (
    CACHE_BODY,
    CACHE_CANDIDATE,
    Hcpe3Cache,
    build_hcpe3_cache,
    hcp_turn,
    result_for_turn,
    visits_to_probs,
)
from train.data.readers import iter_hcpe3_positions, read_data, read_hcpe


def random_game(seed: int, plies: int = 40) -> tuple[np.ndarray, list[int], list[np.ndarray]]:
    """Start hcp, random legal moves, and the hcp before each move (fixed seed)."""
    rng = np.random.default_rng(seed)
    board = cshogi.Board()
    start = np.empty(32, np.uint8)
    board.to_hcp(start)
    moves, hcps = [], []
    for _ in range(plies):
        legal = list(board.legal_moves)
        if not legal:
            break
        hcp = np.empty(32, np.uint8)
        board.to_hcp(hcp)
        hcps.append(hcp)
        moves.append(legal[rng.integers(len(legal))])
        board.push(moves[-1])
    return start, moves, hcps


def random_hcpe3_game(seed: int, plies: int = 30, result: int = BLACK_WIN) -> Hcpe3Game:
    """A random game whose candidates are random legal moves with random visits (some moves none)."""
    rng = np.random.default_rng(seed + 1000)
    start, moves, _ = random_game(seed, plies)
    board = cshogi.Board()
    board.set_hcp(start)
    infos = np.zeros(len(moves), MOVE_INFO)
    cands = []
    for i, move in enumerate(moves):
        infos[i] = (cshogi.move16(move), rng.integers(-3000, 3000), 0)
        legal = list(board.legal_moves)
        if rng.random() < 0.2:
            cands.append(np.zeros(0, MOVE_VISITS))
        else:
            chosen = rng.choice(len(legal), size=min(len(legal), rng.integers(1, 6)), replace=False)
            c = np.zeros(len(chosen), MOVE_VISITS)
            c["move16"] = [cshogi.move16(legal[j]) for j in chosen]
            c["visitNum"] = rng.integers(1, 100, len(chosen))
            cands.append(c)
        board.push(move)
    infos["candidateNum"] = [len(c) for c in cands]
    return Hcpe3Game(start, result, OPPONENT_SELFPLAY, infos, cands)


def sfen_of(hcp: np.ndarray) -> str:
    board = cshogi.Board()
    board.set_hcp(np.asarray(hcp, np.uint8))
    return board.sfen()


def games_equal(a: Hcpe3Game, b: Hcpe3Game) -> bool:
    return (
        bytes(a.hcp) == bytes(b.hcp)
        and (a.result, a.opponent) == (b.result, b.opponent)
        and a.moves.tobytes() == b.moves.tobytes()
        and len(a.candidates) == len(b.candidates)
        and all(x.tobytes() == y.tobytes() for x, y in zip(a.candidates, b.candidates, strict=True))
    )


# --- layouts -----------------------------------------------------------------------------------------


def test_dtype_layouts_match_dlshogi():
    assert HCPE == np.dtype(cshogi.HuffmanCodedPosAndEval) and HCPE.itemsize == 38
    assert [HCPE3_HEADER.fields[k][1] for k in ("hcp", "moveNum", "result", "opponent")] == [0, 32, 34, 35]
    assert [MOVE_INFO.fields[k][1] for k in ("selectedMove16", "eval", "candidateNum")] == [0, 2, 4]
    assert [DATA.fields[k][1] for k in ("hcp", "policy", "result")] == [0, 32, 32 + 4 * 2187]
    assert DATA.itemsize == 8781 and CACHE_BODY.itemsize == 44 and CACHE_CANDIDATE.itemsize == 8
    assert (SENNICHITE, NYUGYOKU, MAX_MOVES) == (4, 8, 16)


def test_is_valid_hcp_accepts_positions_and_rejects_garbage():
    _, _, hcps = random_game(1, 120)
    assert all(is_valid_hcp(h) for h in hcps)
    rng = np.random.default_rng(0)
    assert not any(is_valid_hcp(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(300))
    handicap = cshogi.Board("lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1")
    h = np.empty(32, np.uint8)
    handicap.to_hcp(h)
    assert not is_valid_hcp(h)
    assert hcp_turn(hcps[0]) == cshogi.BLACK and hcp_turn(hcps[1]) == cshogi.WHITE


# --- hcpe and .data ----------------------------------------------------------------------------------


def make_hcpe(seed: int = 3) -> np.ndarray:
    _, moves, hcps = random_game(seed, 50)
    recs = np.zeros(len(moves), HCPE)
    recs["hcp"] = hcps
    recs["eval"] = np.arange(len(moves)) * 7 - 100
    recs["bestMove16"] = [cshogi.move16(m) for m in moves]
    recs["gameResult"] = cshogi.WHITE_WIN
    return recs


def test_hcpe_round_trip_readable_by_cshogi(tmp_path: Path):
    recs = make_hcpe()
    path = tmp_path / "a.hcpe"
    write_hcpe(path, recs)
    raw = np.fromfile(path, cshogi.HuffmanCodedPosAndEval)
    assert raw.tobytes() == recs.tobytes()
    assert [sfen_of(h) for h in raw["hcp"]] == [sfen_of(h) for h in recs["hcp"]]
    back = read_hcpe(path)
    assert isinstance(back, np.memmap) and not back.flags.writeable
    assert back.tobytes() == recs.tobytes()
    append_hcpe(path, recs[:5])
    assert len(read_hcpe(path)) == len(recs) + 5
    assert detect_format(path) == "hcpe"


def test_data_round_trip_and_append(tmp_path: Path):
    _, _, hcps = random_game(4, 6)
    recs = np.zeros(len(hcps), DATA)
    recs["hcp"] = hcps
    recs["policy"] = np.random.default_rng(0).random((len(hcps), 2187), dtype=np.float32)
    recs["result"] = [0, 1, 2, 0, 1, 2]
    path = tmp_path / "x.data"
    write_data(path, recs[:4])
    append_data(path, recs[4:])
    assert path.stat().st_size == 6 * 8781
    back = read_data(path)
    assert back.tobytes() == recs.tobytes()
    assert detect_format(path) == "data"


def test_truncated_fixed_records_warn_and_read_whole_ones(tmp_path: Path):
    recs = make_hcpe()
    path = tmp_path / "t.hcpe"
    path.write_bytes(recs.tobytes()[:-10])
    with pytest.warns(UserWarning, match=rf"t\.hcpe: truncated .* offset {38 * (len(recs) - 1)}"):
        back = read_hcpe(path)
    assert back.tobytes() == recs[:-1].tobytes()
    with pytest.warns(UserWarning, match="dropping a partial record"):
        append_hcpe(path, recs[-1:])
    assert read_hcpe(path).tobytes() == recs.tobytes()


@pytest.mark.parametrize("reader", [read_hcpe, read_data, iter_hcpe3_games, Hcpe3Cache, detect_format])
def test_empty_missing_and_directory_inputs_are_user_errors(tmp_path: Path, reader):
    empty = tmp_path / "empty.hcpe"
    empty.touch()
    for bad, msg in (
        (empty, "empty"),
        (tmp_path / "missing.hcpe", "no such file"),
        (tmp_path, "not a regular"),
    ):
        with pytest.raises(UserError, match=msg):
            result = reader(bad)
            if not isinstance(result, str | Hcpe3Cache | np.ndarray):
                list(result)


def test_wrong_formats_are_user_errors(tmp_path: Path):
    rng = np.random.default_rng(1)
    garbage = tmp_path / "g.hcpe"
    garbage.write_bytes(rng.integers(0, 256, 38 * 20, dtype=np.uint8).tobytes())
    with pytest.raises(UserError, match=r"g\.hcpe: not a hcpe file"):
        read_hcpe(garbage)
    small = tmp_path / "s.data"
    small.write_bytes(make_hcpe().tobytes())
    with pytest.raises(UserError, match=r"s\.data: not a data file"):
        read_data(small)
    hcpe3 = tmp_path / "g.hcpe3"
    hcpe3.write_bytes(rng.integers(0, 256, 500, dtype=np.uint8).tobytes())
    with pytest.raises(UserError, match=r"g\.hcpe3: not an hcpe3 file .* offset 0"):
        list(iter_hcpe3_games(hcpe3))
    cache = tmp_path / "g.cache"
    cache.write_bytes(rng.integers(0, 256, 500, dtype=np.uint8).tobytes())
    with pytest.raises(UserError, match=r"g\.cache: not an hcpe3 cache"):
        Hcpe3Cache(cache)
    unknown = tmp_path / "g.bin"
    unknown.write_bytes(rng.integers(0, 256, 500, dtype=np.uint8).tobytes())
    with pytest.raises(UserError, match="unknown record format"):
        detect_format(unknown)


def test_detect_format_sniffs_content_without_extension(tmp_path: Path):
    path = tmp_path / "noext"
    write_hcpe(path, make_hcpe())
    assert detect_format(path) == "hcpe"
    write_hcpe3_games(path, [random_hcpe3_game(1)])
    assert detect_format(path) == "hcpe3"


# --- hcpe3 -------------------------------------------------------------------------------------------


def test_hcpe3_round_trip_and_replay(tmp_path: Path):
    games = [random_hcpe3_game(s, result=s % 3 | SENNICHITE * (s == 2)) for s in range(4)]
    path = tmp_path / "a.hcpe3"
    assert write_hcpe3_games(path, games) == 4
    expected_size = sum(36 + sum(6 + 4 * len(c) for c in g.candidates) for g in games)
    assert path.stat().st_size == expected_size
    back = list(iter_hcpe3_games(path))
    assert all(games_equal(a, b) for a, b in zip(games, back, strict=True))
    positions = list(iter_hcpe3_positions(path))
    assert len(positions) == sum(len(g.moves) for g in games)
    for seed in range(4):
        _, moves, hcps = random_game(seed, 30)
        mine = [p for p in positions if p.game == seed]
        assert [p.move for p in mine] == moves
        assert [p.ply for p in mine] == list(range(len(moves)))
        assert all(p.hcp.tobytes() == h.tobytes() for p, h in zip(mine, hcps, strict=True))
        assert all(p.result == games[seed].result for p in mine)
        assert [p.eval for p in mine] == games[seed].moves["eval"].tolist()


def test_encode_sets_candidate_num_from_candidates():
    game = random_hcpe3_game(5)
    game.moves["candidateNum"] = 99
    raw = encode_hcpe3_game(game)
    header = np.frombuffer(raw, HCPE3_HEADER, 1)[0]
    assert header["moveNum"] == len(game.moves)
    first = np.frombuffer(raw, MOVE_INFO, 1, 36)[0]
    assert first["candidateNum"] == len(game.candidates[0])


def test_writer_appends_whole_games_and_recovers_from_partial_tail(tmp_path: Path):
    path = tmp_path / "w.hcpe3"
    games = [random_hcpe3_game(s) for s in range(3)]
    with Hcpe3Writer(path) as w:
        for g in games:
            w.write(g)
    size_two = len(encode_hcpe3_game(games[0])) + len(encode_hcpe3_game(games[1]))
    full = path.read_bytes()
    path.write_bytes(full[:-7])
    with pytest.warns(UserWarning, match=rf"w\.hcpe3: truncated final hcpe3 game at byte offset {size_two}"):
        assert len(list(iter_hcpe3_games(path))) == 2
    with pytest.warns(UserWarning, match=f"dropping a partial game at byte offset {size_two}"):
        writer = Hcpe3Writer(path)
    writer.write(games[2])
    writer.close()
    assert path.read_bytes() == full


def test_illegal_move_skips_rest_of_game_with_warning(tmp_path: Path):
    bad = random_hcpe3_game(7)
    bad.moves["selectedMove16"][5] = bad.moves["selectedMove16"][4]  # the other side's move: illegal
    path = tmp_path / "i.hcpe3"
    write_hcpe3_games(path, [random_hcpe3_game(6), bad, random_hcpe3_game(8)])
    with pytest.warns(UserWarning, match=r"i\.hcpe3: game 1, ply 5: illegal move"):
        positions = list(iter_hcpe3_positions(path))
    assert [sum(p.game == g for p in positions) for g in range(3)] == [30, 5, 30]


# --- cache -------------------------------------------------------------------------------------------


def visits(pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.array(pairs, MOVE_VISITS)


def two_move_game(eval0: int, cands0: np.ndarray, result: int) -> Hcpe3Game:
    """7g7f 3c3d from the start position; the second move has no candidates."""
    board = cshogi.Board()
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    m1, m2 = board.move_from_usi("7g7f"), None
    board.push(m1)
    m2 = board.move_from_usi("3c3d")
    infos = np.array([(cshogi.move16(m1), eval0, 0), (cshogi.move16(m2), -50, 0)], MOVE_INFO)
    return Hcpe3Game(hcp, result, 0, infos, [cands0, visits([])])


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x / 756))


M76 = cshogi.move16(cshogi.Board().move_from_usi("7g7f"))
M26 = cshogi.move16(cshogi.Board().move_from_usi("2g2f"))
M56 = cshogi.move16(cshogi.Board().move_from_usi("5g5f"))


@pytest.mark.parametrize(
    ("temperature", "expected"),
    [(1.0, [0.6, 0.3, 0.1]), (0.0, [1.0, 0.0, 0.0]), (0.5, [36 / 46, 9 / 46, 1 / 46])],
)
def test_cache_policy_value_result_by_hand(tmp_path: Path, temperature: float, expected: list[float]):
    path = tmp_path / "c.hcpe3"
    cands = visits([(M76, 6), (M26, 3), (M56, 1)])
    write_hcpe3_games(path, [two_move_game(756, cands, WHITE_WIN)])
    out = tmp_path / "c.cache"
    stats = build_hcpe3_cache(path, out, temperature=temperature)
    assert (stats.positions, stats.entries, stats.no_candidates) == (2, 1, 1)
    cache = Hcpe3Cache(out)
    assert len(cache) == 1
    hcp, value, result, move16s, probs = cache.entry(0)
    assert sfen_of(hcp) == cshogi.Board().sfen()
    assert value == pytest.approx(sigmoid(756))
    assert result == 0.0  # Black to move, White won
    assert move16s.tolist() == [M76, M26, M56]
    assert probs == pytest.approx(expected, abs=1e-6)
    assert out.stat().st_size == 8 + 8 + 44 + 3 * 8  # dlshogi pads each candidate to 8 bytes


def test_cache_keeps_positions_without_candidates_on_request(tmp_path: Path):
    path = tmp_path / "c.hcpe3"
    write_hcpe3_games(path, [two_move_game(0, visits([(M76, 1)]), WHITE_WIN)])
    out = tmp_path / "c.cache"
    build_hcpe3_cache([path], out, skip_no_candidates=False)
    cache = Hcpe3Cache(out)
    _, value, result, move16s, probs = cache.entry(1)
    assert value == pytest.approx(sigmoid(-50)) and result == 1.0  # White to move, White won
    assert len(move16s) == 0 and len(probs) == 0


def test_cache_average_merges_duplicates(tmp_path: Path):
    path = tmp_path / "c.hcpe3"
    games = [
        two_move_game(756, visits([(M76, 3), (M26, 1)]), BLACK_WIN),
        two_move_game(-756, visits([(M26, 1), (M56, 1)]), DRAW | SENNICHITE),
        two_move_game(0, visits([(M76, 1)]), WHITE_WIN),
    ]
    write_hcpe3_games(path, games)
    out = tmp_path / "c.cache"
    stats = build_hcpe3_cache(path, out, average=True)
    assert (stats.entries, stats.merged) == (1, 2)
    _, value, result, move16s, probs = Hcpe3Cache(out).entry(0)
    assert value == pytest.approx((sigmoid(756) + sigmoid(-756) + 0.5) / 3)
    assert result == pytest.approx((1 + 0.5 + 0) / 3)
    got = dict(zip(move16s.tolist(), probs.tolist(), strict=True))
    assert got == pytest.approx({M76: (0.75 + 1) / 3, M26: (0.25 + 0.5) / 3, M56: 0.5 / 3})
    raw = np.frombuffer(out.read_bytes(), CACHE_BODY, 1, 16)[0]
    assert raw["count"] == 3 and raw["result"] == pytest.approx(1.5)  # stored as sums


def test_cache_gather_matches_entries(tmp_path: Path):
    path = tmp_path / "g.hcpe3"
    write_hcpe3_games(path, [random_hcpe3_game(s, result=s % 3) for s in range(5)])
    out = tmp_path / "g.hcpe3cache"
    build_hcpe3_cache(path, out)
    cache = Hcpe3Cache(out)
    positions = [p for p in iter_hcpe3_positions(path) if len(p.candidates)]
    assert len(cache) == len(positions)
    idx = np.random.default_rng(0).integers(0, len(cache), 40)
    hcps, value, result, pairs = cache.gather(idx)
    assert hcps.shape == (40, 32) and value.dtype == np.float32 and result.dtype == np.float32
    for k, i in enumerate(idx):
        hcp, v, r, m, p = cache.entry(int(i))
        pos = positions[i]
        assert hcps[k].tobytes() == hcp.tobytes() == pos.hcp.tobytes()
        assert value[k] == pytest.approx(v) == pytest.approx(sigmoid(pos.eval), abs=1e-6)
        assert result[k] == r == result_for_turn(pos.result, hcp_turn(pos.hcp))
        assert pairs[k][0].tolist() == m.tolist() == pos.candidates["move16"].tolist()
        v_ = pos.candidates["visitNum"]
        assert pairs[k][1] == pytest.approx(v_ / v_.sum())
    assert detect_format(out) == "cache"
    with pytest.raises(IndexError):
        cache.gather([len(cache)])


def test_cache_truncated_and_corrupt(tmp_path: Path):
    path = tmp_path / "g.hcpe3"
    write_hcpe3_games(path, [random_hcpe3_game(s) for s in range(2)])
    out = tmp_path / "g.cache"
    build_hcpe3_cache(path, out)
    full = out.read_bytes()
    num = int(np.frombuffer(full, "<u8", 1)[0])
    offsets = np.frombuffer(full, "<u8", num, 8)
    cut = tmp_path / "cut.cache"
    cut.write_bytes(full[:-3])
    with pytest.warns(UserWarning, match=rf"cut\.cache: truncated .* offset {offsets[-1]}"):
        assert len(Hcpe3Cache(cut)) == num - 1
    cut.write_bytes(full[: int(offsets[5]) + 10])
    with pytest.warns(UserWarning, match=f"offset {offsets[5]}"):
        assert len(Hcpe3Cache(cut)) == 5
    bad = bytearray(full)
    bad[8 + 8 * 3 : 8 + 8 * 4] = (10**6).to_bytes(8, "little")
    broken = tmp_path / "bad.cache"
    broken.write_bytes(bytes(bad))
    with pytest.raises(UserError, match=r"bad\.cache: not an hcpe3 cache \(entry offsets out of range\)"):
        Hcpe3Cache(broken)
    broken.write_bytes(full[:20])
    with pytest.raises(UserError, match="header does not fit"):
        Hcpe3Cache(broken)


def test_visits_to_probs_temperatures():
    v = np.array([4, 1, 4, 0])
    assert visits_to_probs(v, 1.0) == pytest.approx([4 / 9, 1 / 9, 4 / 9, 0])
    assert visits_to_probs(v, 0.0).tolist() == [1, 0, 0, 0]
    assert visits_to_probs(v, 2.0) == pytest.approx(np.sqrt(v) / np.sqrt(v).sum())


def test_no_warnings_on_clean_files(tmp_path: Path):
    path = tmp_path / "a.hcpe3"
    write_hcpe3_games(path, [random_hcpe3_game(1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(iter_hcpe3_positions(path))
        detect_format(path)
