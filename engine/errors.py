"""One error type for user mistakes, so every CLI can print it as a single line and exit non-zero."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from engine.console import say

T = TypeVar("T")


class UserError(Exception):
    """Bad input from the user (a file, a flag, a command): shown as one line, never a traceback."""


def cli_main(prog: str) -> Callable[[Callable[..., T]], Callable[..., int]]:
    """Wrap a CLI entry so a UserError (or Ctrl-C) becomes `prog: message` and an exit status, and each
    warning one `prog: warning: message` line."""

    def one_line(message, category, filename, lineno, line=None) -> str:
        return f"{prog}: warning: {message}\n"  # not Python's two lines naming our source file

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        say(one_line(message, category, filename, lineno).rstrip("\n"), file)

    def wrap(fn: Callable[..., T]) -> Callable[..., int]:
        @wraps(fn)
        def run(*args, **kwargs) -> int:
            warnings.formatwarning = one_line
            warnings.showwarning = show
            try:
                result = fn(*args, **kwargs)
            except UserError as e:
                say(f"{prog}: error: {e}")
                return 2
            except KeyboardInterrupt:
                say(f"{prog}: interrupted")
                return 130
            return int(result or 0)

        return run

    return wrap
