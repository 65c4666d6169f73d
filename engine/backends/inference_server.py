"""One evaluator serving many search processes: one GPU context, one engine build, and the rows of
every search process batched together into each forward call.

`InferenceServer` (in the parent) starts a server process that builds the evaluator from a picklable
factory, and hands out one `Endpoint` per search process. A search process turns its endpoint into a
`ClientEvaluator`, an `Evaluator` like any other (the search never knows): its x1/x2 input buffers
and the policy/value outputs live in a block of shared memory, and a call sends only the row count
over the client's pipe; `submit` returns once it is sent, so the search goes on meanwhile. The
server takes every request that is ready (those that arrived while its last call ran: batching
comes from the device being busy, as on a GPU), optionally waits up to `gather_wait` for clients
still searching (0 by default: waiting for a client that may be far from done only idles the
device), runs them as one forward call, copies each client's outputs into its block and answers
with one byte. No array is pickled.

Failures stay local. A client whose pipe closes (it finished, or was killed) is dropped and the
others go on. A client whose server died gets `InferenceServerError` at its call, not a hang: the
pipe reports end of file, and a reply slower than `timeout` is an error too. The server also ends
when the parent closes its control pipe or dies.

The shared blocks are `multiprocessing` RawArrays handed to both processes when they start: their
memory has no name, so a killed process can leak nothing. A block is sized for the larger input2
(119 planes) because the evaluator, hence its input2, only exists once the server has started.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import struct
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

import numpy as np

from engine.backends.evaluator import Evaluator, Pending
from engine.core.features import FEATURES1_NUM, FEATURES2_NYUGYOKU_NUM
from engine.core.moves import NUM_MOVE_LABELS
from engine.errors import UserError

DEFAULT_GATHER_WAIT = 0.0  # seconds the server waits for clients still searching
DEFAULT_TIMEOUT = 300.0  # seconds a client waits for one reply before it gives up
_REQUEST = struct.Struct("<i")  # rows to evaluate
_OK = b"\x01"  # reply: outputs are in the block; anything else is b"\x00" + an error message
_PLANE = 81
_GONE = "the inference server process has ended; the search cannot go on"


class InferenceServerError(RuntimeError):
    """The inference server is gone or failed: this search cannot go on."""


def block_floats(max_batch: int) -> int:
    """Floats in one client's shared block: inputs for the larger input2, then policy and value."""
    return max_batch * ((FEATURES1_NUM + FEATURES2_NYUGYOKU_NUM) * _PLANE + NUM_MOVE_LABELS + 1)


@dataclass
class Block:
    """Numpy views of one client's shared block."""

    x1: np.ndarray  # [max_batch, FEATURES1_NUM, 9, 9]
    x2: np.ndarray  # [max_batch, input2, 9, 9]
    policy: np.ndarray  # [max_batch, NUM_MOVE_LABELS]
    value: np.ndarray  # [max_batch]


def block_views(raw, max_batch: int, input2: int) -> Block:
    """View a RawArray of `block_floats(max_batch)` floats as a client's buffers (no copy)."""
    buf = np.frombuffer(raw, dtype=np.float32)
    if len(buf) != block_floats(max_batch):
        raise ValueError(f"shared block of {len(buf)} floats, expected {block_floats(max_batch)}")
    shapes = [
        (max_batch, FEATURES1_NUM, 9, 9),
        (max_batch, FEATURES2_NYUGYOKU_NUM, 9, 9),
        (max_batch, NUM_MOVE_LABELS),
        (max_batch,),
    ]
    views, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        views.append(buf[start : start + size].reshape(shape))
        start += size
    x1, x2_max, policy, value = views
    x2 = x2_max.reshape(-1)[: max_batch * input2 * _PLANE].reshape(max_batch, input2, 9, 9)
    return Block(x1, x2, policy, value)


@dataclass
class Endpoint:
    """What a search process needs to reach the server; picklable only while a process starts."""

    conn: Connection
    raw: object  # multiprocessing RawArray of block_floats(max_batch) floats
    max_batch: int
    input2: int
    server_name: str


@dataclass
class ServerStats:
    """The server's own account: rows and forward calls, and the seconds the evaluator was busy out
    of the seconds from the first request to the last reply."""

    rows: int = 0
    calls: int = 0
    busy_seconds: float = 0.0
    seconds: float = 0.0


class ClientEvaluator(Evaluator):
    """An Evaluator whose network runs in the inference server: rows go through the shared block.
    `submit` returns once the request is sent, so the search goes on while the server works; one
    call at a time per client (a process with two leaf batches in flight uses two clients)."""

    overlaps = False  # submit is asynchronous

    def __init__(self, endpoint: Endpoint, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self._conn = endpoint.conn
        self._block = block_views(endpoint.raw, endpoint.max_batch, endpoint.input2)
        self.timeout = timeout
        self.name = f"{endpoint.server_name} (inference server)"
        super().__init__(endpoint.max_batch, endpoint.input2)

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return self._block.x1, self._block.x2

    def input_buffers(self, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The shared block's input rows: rows filled there need no copy before `submit`."""
        return (self._block.x1[:n], self._block.x2[:n]) if n <= self.max_batch else None

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._request(n)()

    def submit(self, x1: np.ndarray, x2: np.ndarray) -> Pending:
        """Send the rows (copied into the block unless they are its own rows) and return at once; the
        server's reply is read when the outputs are asked for."""
        n = len(x1)
        if n > self.max_batch:
            return super().submit(x1, x2)  # in chunks, one at a time
        if not np.shares_memory(x1, self._block.x1):
            self._block.x1[:n] = x1
            self._block.x2[:n] = x2
        return self._request(n)

    def _request(self, n: int) -> Pending:
        """Ask the server to evaluate the block's first n rows; the returned function waits for it."""
        try:
            self._conn.send_bytes(_REQUEST.pack(n))
        except OSError as e:
            raise InferenceServerError(_GONE) from e
        return lambda: self._reply(n)

    def _reply(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        try:
            if not self._conn.poll(self.timeout):
                raise InferenceServerError(f"the inference server did not answer within {self.timeout:g}s")
            reply = self._conn.recv_bytes()
        except (EOFError, OSError) as e:
            raise InferenceServerError(_GONE) from e
        if reply != _OK:
            raise InferenceServerError(f"the inference server failed: {reply[1:].decode(errors='replace')}")
        return self._block.policy[:n], self._block.value[:n]

    def close(self) -> None:
        self._conn.close()


@dataclass
class _Wiring:
    """What the server process is started with (picklable only then)."""

    conns: list[Connection]  # the server's end of each client's pipe
    raws: list  # each client's shared block
    client_batch: int
    control: Connection  # the server's end of the parent's pipe
    gather_wait: float


class _Server:
    """The serving loop, in the server process."""

    def __init__(self, evaluator: Evaluator, wiring: _Wiring) -> None:
        self.ev = evaluator
        self.conns: dict[int, Connection] = dict(enumerate(wiring.conns))  # live clients
        self.blocks = [block_views(raw, wiring.client_batch, evaluator.input2) for raw in wiring.raws]
        self.control = wiring.control
        self.gather_wait = wiring.gather_wait
        self.queue: deque[tuple[int, int]] = deque()  # (client, rows) in arrival order
        self.stats = ServerStats()
        self._first = 0.0

    def _drop(self, client: int) -> None:
        conn = self.conns.pop(client, None)
        if conn is not None:
            conn.close()
        self.queue = deque((c, n) for c, n in self.queue if c != client)

    def _idle(self) -> list[Connection]:
        waiting = {c for c, _ in self.queue}
        return [conn for c, conn in self.conns.items() if c not in waiting]

    def _receive(self, timeout: float | None) -> bool:
        """Read what arrives within `timeout` from clients not already queued; False: stop serving."""
        ready = wait([*self._idle(), self.control], timeout)
        if self.control in ready:
            return False
        for c, conn in list(self.conns.items()):
            if conn not in ready:
                continue
            try:
                (n,) = _REQUEST.unpack(conn.recv_bytes())
            except (EOFError, OSError):
                self._drop(c)
                continue
            if not self._first:
                self._first = time.perf_counter()
            self.queue.append((c, n))
        return True

    def _gather(self) -> bool:
        """After a first request, wait up to gather_wait for the clients still searching."""
        deadline = time.perf_counter() + self.gather_wait
        while self.queue and len(self.queue) < len(self.conns):
            if sum(n for _, n in self.queue) >= self.ev.max_batch:
                break
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            if not self._receive(left):
                return False
        return True

    def _run_batch(self) -> None:
        ev, batch, total = self.ev, [], 0
        while self.queue and total + self.queue[0][1] <= ev.max_batch:
            c, n = self.queue.popleft()
            block = self.blocks[c]
            ev.load_rows(total, block.x1[:n], block.x2[:n])
            batch.append((c, n, total))
            total += n
        start = time.perf_counter()
        try:
            policy, value = ev.evaluate(total)
        except Exception as e:
            for c, _, _ in batch:
                self._send(c, b"\x00" + f"{type(e).__name__}: {e}".encode())
            raise
        now = time.perf_counter()
        self.stats.busy_seconds += now - start
        self.stats.rows += total
        self.stats.calls += 1
        for c, n, offset in batch:
            block = self.blocks[c]
            block.policy[:n] = policy[offset : offset + n]
            block.value[:n] = value[offset : offset + n]
            self._send(c, _OK)
        self.stats.seconds = time.perf_counter() - self._first

    def _send(self, client: int, message: bytes) -> None:
        conn = self.conns.get(client)
        if conn is None:
            return
        try:
            conn.send_bytes(message)
        except OSError:
            self._drop(client)

    def serve(self) -> ServerStats:
        while self.conns or self.queue:
            if not self._receive(0 if self.queue else None):
                break
            if not self.queue:
                continue
            if not self._gather():
                break
            self._run_batch()
        return self.stats


def _server_main(factory: Callable[[], Evaluator], wiring: _Wiring) -> None:
    """The server process: build the evaluator, report ready (or why not), serve, report stats."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    control, client_batch = wiring.control, wiring.client_batch
    try:
        evaluator = factory()
    except UserError as e:
        _report(control, "user_error", str(e))
        return
    except BaseException as e:
        _report(control, "error", f"{type(e).__name__}: {e}")
        return
    with evaluator:
        if client_batch > evaluator.max_batch:
            _report(control, "error", f"client batch {client_batch} > the server's {evaluator.max_batch}")
            return
        _report(control, "ready", evaluator.name, evaluator.input2)
        try:
            stats = _Server(evaluator, wiring).serve()
        except BaseException as e:
            _report(control, "error", f"{type(e).__name__}: {e}")
            return
    _report(control, "done", stats)


def _report(control: Connection, *message: object) -> None:
    """Tell the parent, unless it has stopped listening (then there is nobody to tell)."""
    with suppress(OSError):
        control.send(message)


class InferenceServer:
    """Parent-side handle of the server process.

    `start()` spawns it, waits until the evaluator is built and returns one `Endpoint` per client, to
    be passed to the client processes as they start; `handed_over()` then closes the parent's copies
    of the pipes (so that a client's death reaches the server as end of file); `close()` waits for
    the server to end (it does once every client has closed) and returns its `ServerStats`."""

    def __init__(
        self,
        factory: Callable[[], Evaluator],
        clients: int,
        client_batch: int,
        gather_wait: float = DEFAULT_GATHER_WAIT,
        ctx: mp.context.BaseContext | None = None,
    ) -> None:
        if clients < 1 or client_batch < 1:
            raise ValueError("an inference server needs >= 1 client and a client batch >= 1")
        self.factory = factory
        self.clients = clients
        self.client_batch = client_batch
        self.gather_wait = gather_wait
        self.ctx = ctx or mp.get_context("spawn")
        self.process: mp.process.BaseProcess | None = None
        self.error: str | None = None
        self.stats: ServerStats | None = None
        self._control: Connection | None = None
        self._client_conns: list[Connection] = []
        self._raws: list = []

    def start(self) -> list[Endpoint]:
        """Spawn the server and wait until its evaluator is built."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Spawn the server process and return at once (several servers then build side by side)."""
        ctx = self.ctx
        pipes = [ctx.Pipe() for _ in range(self.clients)]
        raws = [ctx.RawArray("f", block_floats(self.client_batch)) for _ in range(self.clients)]
        self._control, server_control = ctx.Pipe()
        server_conns = [server for server, _ in pipes]
        wiring = _Wiring(server_conns, raws, self.client_batch, server_control, self.gather_wait)
        self.process = ctx.Process(
            target=_server_main, args=(self.factory, wiring), name="inference-server", daemon=True
        )
        self.process.start()
        for conn in (*server_conns, server_control):
            conn.close()
        self._client_conns = [client for _, client in pipes]
        self._raws = raws

    def wait_ready(self) -> list[Endpoint]:
        """Wait until the launched server's evaluator is built; one `Endpoint` per client."""
        raws = self._raws
        kind, *rest = self._message(None)
        if kind != "ready":
            self.close()
            raise (UserError if kind == "user_error" else InferenceServerError)(rest[0])
        name, input2 = rest
        pairs = zip(self._client_conns, raws, strict=True)
        return [Endpoint(conn, raw, self.client_batch, input2, name) for conn, raw in pairs]

    def _message(self, timeout: float | None) -> tuple:
        """The server's next control message; ('error', why) if it ended without one."""
        assert self._control is not None and self.process is not None
        try:
            if self._control.poll(timeout):
                return self._control.recv()
        except (EOFError, OSError):
            self.process.join(5)
            return ("error", f"the inference server process ended (exit code {self.process.exitcode})")
        return ("timeout",)

    def handed_over(self) -> None:
        """The client processes have started with their endpoints: drop the parent's copies."""
        for conn in self._client_conns:
            conn.close()
        self._client_conns = []

    def close(self, timeout: float = 10.0) -> ServerStats | None:
        """Wait up to `timeout` s for the server's final report, then stop it; its stats, or None
        (with `error` set) if it failed."""
        self.handed_over()
        if self._control is not None and self.process is not None:
            kind, *rest = self._message(timeout if self.process.is_alive() else 0)
            if kind == "done":
                self.stats = rest[0]
            elif kind in ("error", "user_error"):
                self.error = rest[0]
            self._control.close()
            self._control = None
            self.process.join(5)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join()
        return self.stats
