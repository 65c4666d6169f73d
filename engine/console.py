"""Lines for the person at the terminal, written above any progress bar on it, never into one.

tqdm redraws its bars with carriage returns; a plain print while one is drawn lands on the bar's line
(`0/8 [00:00<?, ?game/s]info string ...`). tqdm.write clears every bar on the terminal (stdout and
stderr share it), writes the line and redraws them, so every message of the project goes through say()."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


def say(line: str, file: TextIO | None = None) -> None:
    """Write one line to `file` (default: stderr, read at call time so redirections apply) above the bars."""
    out = file if file is not None else sys.stderr
    tqdm.write(line, file=out)
    out.flush()
