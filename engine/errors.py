"""One error type for user mistakes, so every CLI can print it as a single line and exit non-zero."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

T = TypeVar("T")


class UserError(Exception):
    """Bad input from the user (a file, a flag, a command): shown as one line, never a traceback."""


def cli_main(prog: str) -> Callable[[Callable[..., T]], Callable[..., int]]:
    """Wrap a CLI entry so a UserError (or Ctrl-C) becomes `prog: message` and an exit status, and each
    warning one `prog: warning: message` line."""

    def one_line(message, category, filename, lineno, line=None) -> str:
        return f"{prog}: warning: {message}\n"  # not Python's two lines naming our source file

    def wrap(fn: Callable[..., T]) -> Callable[..., int]:
        @wraps(fn)
        def run(*args, **kwargs) -> int:
            warnings.formatwarning = one_line
            try:
                result = fn(*args, **kwargs)
            except UserError as e:
                print(f"{prog}: error: {e}", file=sys.stderr)
                return 2
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130
            return int(result or 0)

        return run

    return wrap
