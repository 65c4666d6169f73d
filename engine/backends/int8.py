"""Int8 ONNX for the CPU: onnxruntime's static quantization of a dlshogi-convention model.

On a CPU the network, not the search, sets how many positions a move searches. Quantizing its
convolutions and fully-connected layers (per-channel int8 weights, uint8 activations, QDQ format) runs
it about twice as fast on onnxruntime's integer kernels, while its choices stay those of the fp32 net
except between near-equal moves (bench/int8.py prints both). Activations are calibrated on positions
the network itself reaches, games from the start that sample its own policy, so any model (ours or
dlshogi's) calibrates without a data file. The result is cached beside the fp32 ONNX, keyed by its hash.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import cshogi
import numpy as np

from engine.backends.evaluator import Evaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.errors import UserError
from engine.fileio import atomic_write_bytes

CALIBRATION_GAMES = 32  # played side by side: one network call per ply
CALIBRATION_PLIES = 48  # positions per game (a finished game starts again from the start)
QUANTIZED_OPS = ["Conv", "Gemm"]  # activations (sigmoid, mul) and adds stay float: closer to fp32
PRECISION_KEY = "gumbel_shogi.precision"  # ONNX metadata of a quantized model


def own_games(
    ev: Evaluator, games: int = CALIBRATION_GAMES, plies: int = CALIBRATION_PLIES, seed: int = 0
) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """Per ply of `games` games the network plays side by side by sampling its own policy: the positions
    (sfen) and their feature rows. The same for the same network and seed."""
    rng = np.random.default_rng(seed)
    n = min(games, ev.max_batch)
    boards = [cshogi.Board() for _ in range(n)]
    for _ in range(plies):
        for i, board in enumerate(boards):
            fill_features(board, ev.x1[i], ev.x2[i])
        row = ([b.sfen() for b in boards], ev.x1[:n].copy(), ev.x2[:n].copy())
        policy, _ = ev.evaluate(n)
        for i, board in enumerate(boards):
            moves, labels = legal_moves_and_labels(board)
            noisy = policy[i][labels] + rng.gumbel(size=len(labels))  # a sample of softmax(logits)
            board.push(int(moves[np.argmax(noisy)]))
            if board.is_game_over() or board.move_number > 256:
                board.reset()
        yield row


def quantize(fp32: Path, out: Path, batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> Path:
    """Write the int8 model of `fp32` to `out` (atomically), calibrated on `batches`."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from engine.backends.io_spec import INPUT_NAMES

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(batches, None)
            return None if batch is None else dict(zip(INPUT_NAMES, batch, strict=True))

    quiet = logging.getLogger()  # the quantizer advises on the root logger; a USI engine stays quiet
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="int8-") as tmp:
            pre, q = Path(tmp) / "pre.onnx", Path(tmp) / "int8.onnx"
            quant_pre_process(str(fp32), str(pre))
            quantize_static(
                str(pre), str(q), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=QUANTIZED_OPS,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
            )  # fmt: skip
            model = onnx.load(str(q))
            onnx.helper.set_model_props(model, {PRECISION_KEY: "int8"})  # the evaluator's name says it
            atomic_write_bytes(out, model.SerializeToString())
    finally:
        quiet.setLevel(level)
    return out


def cached_int8(
    fp32: Path,
    cache_dir: Path,
    make_evaluator: Callable[[int], Evaluator],
    stage: Callable[[str, str], None],
) -> Path:
    """The int8 model of the ONNX file `fp32` under `cache_dir`, quantized on first use (the fp32 model,
    built by `make_evaluator(max_batch)`, plays the calibration games); `stage(doing, note)` hears when
    that one-time calibration begins (the USI engine tells a GUI)."""
    from engine.backends.onnx_files import onnx_sha256

    out = cache_dir / f"{onnx_sha256(fp32)[:24]}-int8-{CALIBRATION_GAMES}x{CALIBRATION_PLIES}.onnx"
    if out.is_file():
        return out
    stage("calibrating int8", f"one-time, cached in {cache_dir}")
    ev = make_evaluator(CALIBRATION_GAMES)
    try:
        if getattr(ev, "fp16", False):
            raise UserError(f"{fp32.name} is typed FP16; int8 quantizes an FP32 model")
        return quantize(fp32, out, ((x1, x2) for _, x1, x2 in own_games(ev)))
    finally:
        ev.close()
