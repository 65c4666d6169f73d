"""Mate search with cshogi's df-pn in a child process, bounded by wall-clock time and a stop flag.

cshogi's `DfPn.search` holds the GIL for its whole run and cannot be interrupted from Python: in the
engine's process it would freeze the USI reader (no `stop`, no `quit`) and run past the move's time,
and restarting it in small rounds throws its table away each round. In a child process it runs at
full speed while the engine waits, checking the deadline and the stop flag every few milliseconds;
on either the child is killed and a fresh one is started in the background for the next search. The
node budget sent with each request comes from the node rate measured so far, so a search usually
ends by itself before its deadline and the child survives.

Run as a script (`python engine/search/mate.py`) this file is the child: it imports nothing of the engine.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import cshogi

MAX_DEPTH = 37
MAX_LEAF_PLIES = 7  # the deepest mate probe a search leaf may make (cshogi's fixed-depth search)
MAX_NODES = 2**32 - 1  # cshogi's own "no limit"
POLL_S = 0.005  # how often a waiting search looks at its deadline and stop flag
INITIAL_NODES_PER_S = 100_000  # the slow end of what df-pn reaches on one loaded core
MIN_NODES = 1000  # below this a search is not worth a round trip
BUDGET_SHARE = 0.7  # of the time left, turned into nodes at the measured rate (the rest is slack)


@dataclass(frozen=True)
class MateResult:
    """`pv` is the mating line when mate was proven; `proven_none` when the search proved there is none
    (within its depth); neither: it ran out of nodes or time, was stopped, or the child failed."""

    pv: list[int] | None
    proven_none: bool = False
    error: str | None = None  # the child failed: say so once, search goes on without mates


def leaf_mate_value(board: cshogi.Board, plies: int) -> float | None:
    """1.0 when the side to move mates within `plies` plies, 0.0 when it is in check and mated within
    `plies - 1`, else None. cshogi's fixed-depth searches (dlshogi's mateMoveInOddPly/EvenPly) cost
    microseconds, so a search can ask at every new leaf; a network misjudges such tactics most.
    An even `plies` searches the odd depth below it; 0 asks nothing."""
    if board.is_check():
        return 0.0 if plies >= 3 and board.is_mate((plies - 1) & ~1) else None
    if plies >= 1 and board.mate_move_in_1ply():
        return 1.0
    return 1.0 if plies >= 3 and board.mate_move((plies - 1) | 1) else None


def mated_in_two(board: cshogi.Board) -> list[int] | None:
    """[our move, their mate in one] when every legal move of the side to move allows a mate in one
    (cheap: one C++ 1-ply mate probe per move); None when some move does not, or there is none."""
    line = None
    for move in board.legal_moves:
        board.push(move)
        mate = 0 if board.is_check() else board.mate_move_in_1ply()  # an answer to a check: not probed
        board.pop()
        if not mate:
            return None
        line = line or [move, mate]
    return line


class MateSearcher:
    """One df-pn child process, started on demand and replaced after it is killed or dies."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._replies: queue.Queue[str] = queue.Queue()
        self._ready = threading.Event()  # the child has imported cshogi and reads requests
        self._spawning = threading.Lock()
        self._closed = False
        self.nodes_per_s = float(INITIAL_NODES_PER_S)

    def warm(self) -> None:
        """Start the child now (it takes ~0.1 s to import cshogi) so the next search need not wait."""
        with self._spawning:
            if not self._closed and (self._proc is None or self._proc.poll() is not None):
                self._spawn()

    def _spawn(self) -> None:
        # -P: the child's sys.path must not start with engine/, whose modules could shadow the stdlib
        cmd = [sys.executable, "-P", os.path.abspath(__file__), str(os.getpid())]
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, encoding="ascii", bufsize=1,
            )  # fmt: skip
        except OSError:
            self._proc = None
            return
        replies: queue.Queue[str] = queue.Queue()
        ready = threading.Event()
        reader = threading.Thread(target=_pump, args=(proc.stdout, replies, ready), daemon=True)
        reader.start()
        self._proc, self._replies, self._ready = proc, replies, ready

    @staticmethod
    def _poll(
        take: Callable[[float], str | None], deadline: float | None, stopped: Callable[[], bool]
    ) -> str | None:
        """`take(timeout)` until it gives a line; None at the deadline or on stop (checked every POLL_S)."""
        while True:
            timeout = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if timeout <= 0 or stopped():
                return None
            line = take(timeout)
            if line is not None:
                return line

    def search(
        self,
        sfen: str,
        moves: Sequence[int],
        depth: int,
        deadline: float | None = None,
        stopped: Callable[[], bool] = lambda: False,
        max_nodes: int = MAX_NODES,
        defender: bool = False,
    ) -> MateResult:
        """Does the side to move at `sfen` + `moves` mate within `depth` plies (with `defender`: is it
        mated whatever it plays; each legal move is searched for the opponent's mate, so it suits a
        position in check, with few moves)? Ends by `deadline` (time.monotonic()) at the latest, and
        within POLL_S of `stopped()` turning true."""
        nodes = max_nodes
        if deadline is not None:
            nodes = min(nodes, int(self.nodes_per_s * (deadline - time.monotonic()) * BUDGET_SHARE))
        if nodes < MIN_NODES or stopped():
            return MateResult(None)
        self.warm()
        ready = self._ready
        if self._poll(lambda t: "" if ready.wait(t) else None, deadline, stopped) is None:
            return MateResult(None)  # still starting: leave it be, it will serve the next search
        kind = "and" if defender else "or"
        request = f"{kind} {depth} {nodes} {sfen} moves {' '.join(cshogi.move_to_usi(m) for m in moves)}\n"
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
        except (OSError, AttributeError):  # the child died, or could not be started
            self._kill()
            return MateResult(None, error=f"the mate search process ({sys.executable}) is not running")
        reply = self._poll(partial(_get, self._replies), deadline, stopped)
        if reply is None:
            if not stopped():
                self.nodes_per_s /= 2  # it ran out of time: budget more cautiously next time
            self._kill()
            return MateResult(None)
        result = self._parse(reply, nodes, sfen, moves)
        return MateResult(result.pv, error=result.error) if defender else result  # "none": not a proof

    def _parse(self, reply: str, nodes: int, sfen: str, moves: Sequence[int]) -> MateResult:
        """Replies: `mate <usi moves>`, `none <nodes searched> <seconds>`, or `error <text>`; an empty
        line means the child died."""
        words = reply.split()
        if not words:
            self._kill()
            return MateResult(None, error="the mate search process died")
        if words[0] == "error":
            return MateResult(None, error="mate search: " + " ".join(words[1:]))
        if words[0] == "mate":
            return MateResult(_line_moves(sfen, moves, words[1:]) or None)  # empty: mated already
        searched, seconds = int(words[1]), float(words[2])
        if searched >= MIN_NODES and seconds > 0:
            self.nodes_per_s = searched / seconds
        return MateResult(None, proven_none=searched < nodes)

    def _kill(self) -> None:
        """End the child (mid-search if need be) and return at once: reaping it and starting its
        successor happen in the background."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
        threading.Thread(target=self._replace, args=(proc,), name="mate-respawn", daemon=True).start()

    def _replace(self, proc: subprocess.Popen | None) -> None:
        if proc is not None:
            _reap(proc)
        if not self._closed:
            self.warm()

    def close(self) -> None:
        """No more searches: end the child and start no other."""
        with self._spawning:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            _reap(proc)


def _get(q: queue.Queue[str], timeout: float) -> str | None:
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        return None


def _reap(proc: subprocess.Popen) -> None:
    proc.wait()
    try:
        proc.stdin.close()  # its stdout is closed by the reader thread at EOF
    except OSError:
        pass


def _line_moves(sfen: str, moves: Sequence[int], usi_line: list[str]) -> list[int]:
    """The child's USI line as cshogi moves of the position it was asked about."""
    board = cshogi.Board(sfen)
    for m in moves:
        board.push(m)
    line = []
    for usi in usi_line:
        line.append(board.move_from_usi(usi))
        board.push(line[-1])
    return line


def _pump(stream, replies: queue.Queue[str], ready: threading.Event) -> None:
    """Forward the child's reply lines after its `ready`; an empty string marks its end."""
    with stream:
        for line in stream:
            if line == "ready\n":
                ready.set()
            else:
                replies.put(line)
    replies.put("")
    ready.set()  # a child that died before it was ready: the request fails at once, not at the deadline


# ----- the child -----


def _die_with_parent(parent: int) -> None:
    """A search without a node limit must not outlive an engine that was killed."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(0)


def _answer(line: str) -> str:
    words = line.split()
    kind, depth, nodes = words[0], int(words[1]), int(words[2])
    k = words.index("moves")
    board = cshogi.Board(" ".join(words[3:k]))
    for usi in words[k + 1 :]:
        board.push_usi(usi)
    start = time.perf_counter()
    line, searched = _defence(board, depth, nodes) if kind == "and" else _attack(board, depth, nodes)
    if line is not None:
        return "mate " + " ".join(cshogi.move_to_usi(m) for m in line)
    return f"none {searched} {time.perf_counter() - start:.6f}"


def _attack(board: cshogi.Board, depth: int, nodes: int) -> tuple[list[int] | None, int]:
    """The side to move's mating line (cshogi's df-pn also handles a root in check), nodes searched."""
    dfpn = cshogi.DfPn(depth, nodes)
    found = dfpn.search(board)
    return (list(dfpn.get_pv(board)) if found else None), dfpn.searched_node


def _defence(board: cshogi.Board, depth: int, nodes: int) -> tuple[list[int] | None, int]:
    """The longest line when every move of the side to move is answered by a forced mate (cshogi's
    search_andnode proves it but gives no line), else None at the first move that escapes."""
    moves = list(board.legal_moves)
    longest: list[int] = []
    searched = 0
    for move in moves:
        board.push(move)
        line, n = _attack(board, depth - 1, max(nodes // len(moves), 1))
        board.pop()
        searched += n
        if line is None:
            return None, searched
        if len(line) + 1 > len(longest):
            longest = [move, *line]
    return longest, searched


def _child(parent: int) -> None:
    _die_with_parent(parent)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            reply = _answer(line)
        except Exception as e:  # a malformed request must not leave the engine waiting
            reply = f"error {type(e).__name__}: {e}".replace("\n", " ")
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _child(int(sys.argv[1]))
