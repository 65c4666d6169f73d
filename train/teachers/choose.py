"""Which teacher a `--teacher` spec names, opened: miniosl's network or one of our models.

The factory lives apart from the interface (train/teachers/teacher.py) so that imports run one way:
the implementations import the interface, this module imports them, and nothing imports back.
"""

from __future__ import annotations

import importlib.util

from engine.errors import UserError
from train.teachers.teacher import MINIOSL, Teacher, miniosl_path

INSTALL_HINT = "pip install -e '.[teacher]'"


def open_teacher(
    spec: str | None, *, backend: str = "auto", max_batch: int = 256, threads: int | None = None
) -> Teacher:
    """The teacher `spec` names: `miniosl[:PATH.onnx]`, else a model file of ours (None: the shipped one).
    `threads`: the runtime's CPU threads (None: its own choice)."""
    path = miniosl_path(spec)
    if path is None:
        from engine.backends.choose import create_evaluator
        from train.teachers.network_teacher import NetworkTeacher

        return NetworkTeacher(create_evaluator(spec, backend=backend, max_batch=max_batch, threads=threads))
    if importlib.util.find_spec("miniosl") is None:
        raise UserError(f"--teacher {MINIOSL} needs the optional extra 'teacher': {INSTALL_HINT}")
    from train.teachers.miniosl_teacher import MinioslTeacher

    return MinioslTeacher(path or None, max_batch=max_batch, threads=threads or 0)
