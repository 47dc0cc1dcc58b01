"""`quiet()`: silence executorch's per-transition INFO logs and torch's noisy warnings, inside a block only; `output_to()`
(and `console_to()`, the zoo workers' for good): what is printed goes to a log file, not the console."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Inside the block the root logger is at WARNING and FutureWarnings / torch UserWarnings are ignored;
    the logger level and the warning filters are restored on exit (exceptions included).

    >>> with quiet():
    ...     logging.getLogger().isEnabledFor(logging.INFO)
    False
    """
    root = logging.getLogger()
    level = root.level
    with warnings.catch_warnings():
        # executorch's Vulkan pass logs every transition at INFO on the root logger.
        root.setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        try:
            yield
        finally:
            root.setLevel(level)


def console_to(log_path) -> tuple[int, int]:
    """Point file descriptors 1 and 2 (what Python and native code print) at `log_path` (appended); returns
    duplicates of the two as they were, for a caller that puts them back."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(os.fspath(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


@contextlib.contextmanager
def output_to(log_path) -> Iterator[None]:
    """Inside the block whatever is printed (file descriptors 1 and 2: Python prints, native libraries' warnings
    such as the TOSA serializer's) goes to `log_path` (appended), not the console, and Python warnings and
    library logs below ERROR are off (as in the zoo's workers); all restored on exit (exceptions included). For a
    command whose console shows only its own summary, the rest kept where the summary names it."""
    disabled = logging.root.manager.disable
    saved = console_to(log_path)
    try:
        logging.disable(logging.WARNING)
        # Python's own streams too, where something replaced them (pytest's capture, a notebook)
        with (
            open(os.dup(1), "a", buffering=1, closefd=True) as stream,
            contextlib.redirect_stdout(stream),
            contextlib.redirect_stderr(stream),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in saved:
            os.close(descriptor)
        logging.disable(disabled)
