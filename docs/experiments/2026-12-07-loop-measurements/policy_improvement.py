#!/usr/bin/env python3
"""Policy improvement against playouts: how much a search of n playouts a move adds to a model's raw
policy, and to a search of n/4, measured in games between two copies of `bin/usi_engine`.

For every n of --sims and every --modes (gumbel: the Gumbel root that self-play uses, without its
noise; puct: the engine's search), engine 1 searches n playouts a move (`go nodes n`) against engine
2, either the raw policy (Search_Mode policy, one network call a move) or the same search at n/4.
Games start from --book-openings lines, both colours. Both engines: no opening book, no root mate
search (leaf mate probes of 1 ply, as self-play), one thread, so that only the search differs.

Each point's games are appended as a row to --out (JSON lines, rewritten atomically); a rerun skips
the games a point already has and plays only what --games adds (new openings: the seed moves on), so
the run resumes after a stop and grows by rerunning with more --games. At the end (or with
--report) it prints each point's W-L-D and Elo with its 95 % interval.

  nice -n 15 docs/experiments/2026-12-07-loop-measurements/policy_improvement.py \
      --out runs/bench/policy_improvement.jsonl --sims 16,32,64,128,256,800 --modes gumbel,puct --games 20
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from engine.errors import UserError, cli_main  # noqa: E402
from engine.fileio import atomic_write_text  # noqa: E402
from engine.match.elo import elo_estimate  # noqa: E402
from engine.usi_spec import EngineSpec, GoLimit  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ENGINE = str(ROOT / "bin" / "usi_engine")
BOOK = "/usr/share/gpsshogi-data/data/joseki.dat"
OPPONENTS = ("policy", "quarter")
# what only the search should change: no book, no root df-pn process, self-play's 1-ply leaf probe
SEARCH_ONLY = {"USI_OwnBook": "false", "Mate_Root_Search": "0", "Mate_Leaf_Search": "1", "Threads": "1"}


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSON-lines file; [] if it does not exist (a torn last line is skipped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def append_row(path: Path, row: dict) -> None:
    """Add one row to a JSON-lines file, the whole file rewritten atomically."""
    rows = read_rows(path) + [row]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def point_key(row: dict) -> tuple:
    return (row["mode"], row["sims"], row["opponent"])


def aggregate(rows: Iterable[dict]) -> dict[tuple, dict]:
    """Rows of one point summed: wins, losses, draws, games, and the Elo estimate over them."""
    out: dict[tuple, dict] = {}
    for r in rows:
        a = out.setdefault(point_key(r), {"wins": 0, "losses": 0, "draws": 0, "seconds": 0.0})
        for k in ("wins", "losses", "draws"):
            a[k] += r[k]
        a["seconds"] += r.get("seconds", 0.0)
    for a in out.values():
        e = elo_estimate(a["wins"], a["losses"], a["draws"])
        a.update(games=e.games, score=e.score, elo=e.elo, error95=e.error95)
    return out


def engine_specs(model: str, mode: str, sims: int, opponent: str) -> tuple[list[EngineSpec], list[GoLimit]]:
    """Engine 1 at `sims` playouts in `mode`; engine 2 the raw policy or the same search at sims/4."""
    base = {"DNN_Model": model, **SEARCH_ONLY}
    one = EngineSpec(ENGINE, {**base, "Search_Mode": mode}, f"{mode}{sims}")
    if opponent == "policy":
        two = EngineSpec(ENGINE, {**base, "Search_Mode": "policy"}, "policy")
        limit2 = GoLimit(nodes=1)
    else:
        quarter = max(sims // 4, 2)
        two = EngineSpec(ENGINE, {**base, "Search_Mode": mode}, f"{mode}{quarter}")
        limit2 = GoLimit(nodes=quarter)
    return [one, two], [GoLimit(nodes=sims), limit2]


def play_point(args: argparse.Namespace, mode: str, sims: int, opponent: str, done: int, batch: int) -> dict:
    """Play the games a point still lacks; the row to append."""
    import time

    from engine.match.arbiter import run_match
    from engine.match.openings import book_openings

    games = args.games - done
    seed = args.seed + 1000 * batch + sims  # new openings for every batch of a point
    openings = book_openings(args.book, (games + 1) // 2, args.book_plies, seed)
    specs, limits = engine_specs(args.model, mode, sims, opponent)
    start = time.monotonic()
    result = run_match(
        specs,
        games,
        limits=limits,
        timeout=args.timeout,
        max_moves=args.max_moves,
        openings=openings,
        progress=args.progress,
    )
    s = result.summary()
    keep = ("wins", "losses", "draws", "pentanomial", "reasons", "mean_plies")
    return {
        "mode": mode,
        "sims": sims,
        "opponent": opponent,
        "seed": seed,
        "seconds": round(time.monotonic() - start, 1),
        **{k: s[k] for k in keep if k in s},
    }


def print_report(rows: list[dict]) -> None:
    print(f"{'mode':7} {'n':>5} {'vs':>8} {'games':>5} {'W-L-D':>10} {'score':>6} {'Elo':>16} {'s/game':>7}")
    for (mode, sims, opp), a in sorted(aggregate(rows).items()):
        vs = "policy" if opp == "policy" else f"n/4={max(sims // 4, 2)}"
        wld = f"{a['wins']}-{a['losses']}-{a['draws']}"
        elo = f"{a['elo']:+.0f} +/- {a['error95']:.0f}"
        per = a["seconds"] / max(a["games"], 1)
        print(f"{mode:7} {sims:5d} {vs:>8} {a['games']:5d} {wld:>10} {a['score']:6.3f} {elo:>16} {per:7.1f}")


def parse_list(text: str, flag: str, convert=str) -> list:
    try:
        items = [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag}: cannot read {text!r}") from None
    if not items:
        raise UserError(f"{flag}: empty list")
    return items


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench/policy_improvement.jsonl", help="JSON lines, one row a batch")
    p.add_argument("--model", default=str(ROOT / "models" / "default.pt"))
    p.add_argument("--sims", default="16,32,64,128,256,800", help="playouts a move, comma-separated")
    p.add_argument("--modes", default="gumbel,puct", help="gumbel, puct or both")
    p.add_argument("--opponents", default="policy,quarter", help="policy (raw), quarter (n/4) or both")
    p.add_argument("--games", type=int, default=20, help="games per point (even: both colours)")
    p.add_argument("--book", default=BOOK, help="OSL opening book the openings are drawn from")
    p.add_argument("--book-plies", type=int, default=16)
    p.add_argument("--seed", type=int, default=5101)
    p.add_argument("--max-moves", type=int, default=320)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a move is lost on time")
    p.add_argument("--report", action="store_true", help="print the table of --out and exit")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


@cli_main("policy_improvement")
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    sims = parse_list(args.sims, "--sims", int)
    modes = parse_list(args.modes, "--modes")
    opponents = parse_list(args.opponents, "--opponents")
    if bad := [m for m in modes if m not in ("gumbel", "puct")]:
        raise UserError(f"--modes: {bad[0]!r} is not gumbel or puct")
    if bad := [o for o in opponents if o not in OPPONENTS]:
        raise UserError(f"--opponents: {bad[0]!r} is not policy or quarter")
    if min(sims) < 2 or args.games < 1:
        raise UserError("--sims must be >= 2 and --games >= 1")
    if not args.report:
        if not Path(args.book).is_file():
            raise UserError(f"--book {args.book}: no such file (apt-get install gpsshogi-data)")
        for n in sorted(sims):
            for mode in modes:
                for opp in opponents:
                    rows = [r for r in read_rows(out) if point_key(r) == (mode, n, opp)]
                    done = sum(r["wins"] + r["losses"] + r["draws"] for r in rows)
                    if done >= args.games:
                        continue
                    print(f"policy_improvement: {mode} {n} vs {opp}: {args.games - done} games", flush=True)
                    append_row(out, play_point(args, mode, n, opp, done, len(rows)))
    print_report(read_rows(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
