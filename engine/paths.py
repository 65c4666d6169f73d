"""Where the checkout's own folders are, for code that finds `models/` and `bin/` without being told."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO_ROOT / "models"
