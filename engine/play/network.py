"""The engine's network as the USI options ask for it: one evaluator per UCT thread (each keeps a batch
in flight beside the search, engine.search.puct), loaded and warmed up at isready, the first one timed
so the search's deadlines leave room for a network call. Each step is named to `stage` as it begins
(engine.play.preparing tells a GUI what a long first isready is doing)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.backends.choose import create_evaluator
from engine.backends.evaluator import Evaluator
from engine.play.deadlines import TimedEvaluator
from engine.play.preparing import Stage


def slot_threads(threads_option: int, slots: int, cores: int | None = None) -> int | None:
    """Intra-op threads for each evaluator: the `Threads` option when set; else one evaluator keeps the
    runtime's default (all cores) and several share the cores, so their calls do not fight over them."""
    if threads_option:
        return threads_option
    if slots == 1:
        return None
    return max(1, (cores or os.cpu_count() or 1) // slots)


def load_evaluators(
    path: Path | None, values: dict[str, Any], log: Callable[[str], None], stage: Stage
) -> list[Evaluator]:
    """`UCT_Threads` evaluators of the model at `path` (None: the shipped one), warmed up (first calls
    allocate, compile, autotune); only the first logs its backend. Raises what create_evaluator raises."""
    slots = int(values["UCT_Threads"])
    threads = slot_threads(int(values["Threads"]), slots)
    evaluators: list[Evaluator] = []
    try:
        for i in range(slots):
            stage("loading the model", str(path or "the shipped default"))
            ev = create_evaluator(
                path, backend=values["Backend"], max_batch=values["DNN_Batch_Size"], threads=threads,
                activation=values["DNN_Activation"], int8=values["CPU_Int8"], log=log if i == 0 else _quiet,
                stage=stage,
            )  # fmt: skip
            evaluators.append(ev)
            stage("warming up the network", "")
            ev.evaluate(1)
            ev.evaluate(ev.max_batch)
        timed = TimedEvaluator(evaluators[0])
        timed.evaluate(timed.max_batch)  # a first measure of a full batch's time
    except BaseException:
        for ev in evaluators:
            ev.close()
        raise
    if slots > 1:
        each = f"{timed.max_batch} positions, Threads {threads} each"
        log(f"info string UCT_Threads {slots}: {slots} batches in flight of {each}")
    return [timed, *evaluators[1:]]


def _quiet(_: str) -> None:
    """The spare evaluators' log: the first one already said which backend and why."""
