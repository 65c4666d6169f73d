"""A distillation corpus in chunks, made by several runs or machines: DIR/chunk-00000.hcpe3, ... each holding
games [i * G, (i + 1) * G) of the (seed, game index) stream, so chunk i depends on the settings and i
alone, and any chunk is remade by the same command (or by a run that makes it alone): bit for bit where
the teacher computes the same floats (on another machine, chunk 7 of the miniosl corpus came out as the
same games with targets a rounding apart: models/README.md).

DIR/distill.json holds the settings every chunk was made with (written atomically before the first game);
a run with other settings is refused, since its chunks would not belong to the same stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.fileio import atomic_write_text, check_output_dir, check_settings_file

SETTINGS = "distill.json"


def chunk_path(folder: Path, index: int) -> Path:
    return folder / f"chunk-{index:05d}.hcpe3"


def check_chunk_settings(folder: Path, settings: dict[str, Any]) -> None:
    """A UserError unless `folder` can hold chunks made with `settings` (it is new, or was made with
    them); creates nothing."""
    check_output_dir(folder, "--chunks")
    check_settings_file(folder / SETTINGS, settings, "chunks")


def write_chunk_settings(folder: Path, settings: dict[str, Any]) -> None:
    """Record `settings` in a new folder (once checked by `check_chunk_settings`)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / SETTINGS).exists():
        atomic_write_text(folder / SETTINGS, json.dumps(settings, indent=1) + "\n")
