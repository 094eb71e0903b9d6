"""What the long commands do on a signal.

`terminate_as_interrupt`: SIGTERM taken as Ctrl-C, for commands whose work is short pieces (a benchmark): stopped by
`timeout` or a scheduler, they end the way an interrupt does, keeping what they finished.

`stop_on_terminate`: for training (`lra run`, `lra campaign`), where a piece is hours long. The first SIGTERM or
SIGUSR1 only asks (`STOP`): the run stops at its next logging point with its full state saved, as on its time limit,
and says how to resume. That is what a scheduler's notice is for (SLURM's `--signal`, a spot machine's warning, a
session script ending its call); a second SIGTERM, or Ctrl-C, stops at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt; the previous handler is back after it. Signals reach the
    main thread only, so elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopRequest:
    """Whether this process has been asked to stop cleanly, and by which signal (its name, e.g. 'SIGTERM')."""

    def __init__(self) -> None:
        self.signal: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def ask(self, name: str) -> None:
        self.signal = self.signal or name

    def clear(self) -> None:
        self.signal = None


STOP = StopRequest()
ASKING = (signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def stop_on_terminate() -> Iterator[StopRequest]:
    """Within the block, the first SIGTERM or SIGUSR1 sets `STOP` (the work polls it at its safe points); a second
    SIGTERM raises KeyboardInterrupt. The previous handlers, and a clear `STOP`, are back after it. Main thread
    only: elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield STOP
        return

    def ask(signum: int, frame: object) -> None:
        if STOP.requested and signum == signal.SIGTERM:
            raise KeyboardInterrupt
        STOP.ask(signal.Signals(signum).name)

    STOP.clear()
    previous = {sig: signal.signal(sig, ask) for sig in ASKING}
    try:
        yield STOP
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        STOP.clear()
