"""Which training-record format a file holds: by its extension, else by its content, validated either way."""

from __future__ import annotations

import warnings
from pathlib import Path

from engine.errors import UserError
from engine.records.formats import EXTENSIONS, PathLike
from engine.records.hcpe3_games import check_hcpe3, existing_file
from train.data.hcpe3_cache import Hcpe3Cache
from train.data.readers import read_data, read_hcpe

# A bin/corpus folder is known by this file; its corpus.hcpe and corpus.hcpe3 hold the same games.
CORPUS_SETTINGS = "corpus.json"


def _sniff(path: Path) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in ("cache", "data", "hcpe", "hcpe3"):
            try:
                _VALIDATORS[fmt](path)
            except UserError:
                continue
            return fmt
    return None


_VALIDATORS = {
    "hcpe": read_hcpe,
    "data": read_data,
    "cache": Hcpe3Cache,
    "hcpe3": check_hcpe3,
}


def detect_format(path: PathLike) -> str:
    """'hcpe' | 'hcpe3' | 'cache' | 'data': by extension, else by content; the content is validated."""
    p = existing_file(path)
    fmt = EXTENSIONS.get(p.suffix.lower())
    if fmt is None:
        fmt = _sniff(p)
        if fmt is None:
            raise UserError(f"{p}: unknown record format (not hcpe, hcpe3, hcpe3 cache or .data)")
        return fmt
    _VALIDATORS[fmt](p)
    return fmt
