"""`quiet()`: silence executorch's per-transition INFO logs and torch's noisy warnings, inside a block only."""

from __future__ import annotations

import contextlib
import logging
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
