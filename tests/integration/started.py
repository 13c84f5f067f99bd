"""A harness that is started and stopped as a ``with`` block: ``with SshdFleet(...) as fleet:``
starts it and stops it however the block ends."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Started:
    """``__enter__`` is ``start()``, which returns the harness; ``__exit__`` is ``stop()``."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
