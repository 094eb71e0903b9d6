"""The project's user-error types. The CLI prints these as one line (exit 2); anything else is a bug and keeps its
traceback. Each message says what was wrong and what to do."""

from __future__ import annotations

import errno


class LraError(Exception):
    """Base of every error a user can cause and fix (bad settings, missing data, an impossible run)."""


class ConfigError(LraError, ValueError):
    """A config, preset, option or override that cannot be used; the message says what is valid."""


class UnknownNameError(LraError, KeyError):
    """A name that is not registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the message as written
        return str(self.args[0])


class DataMissingError(LraError, FileNotFoundError):
    """A task's data is not where it is expected; the message says where it comes from and how to prepare it."""


class DataCorruptError(LraError, ValueError):
    """Input data is malformed; the message names the file and the row."""


class RunSetupError(LraError, ValueError):
    """A run cannot start as asked (backend/device mismatch, run directory conflicts); the message says why."""


class WriteError(LraError, OSError):
    """A file cannot be written (a read-only or full disk, a missing folder); the message names it and what to do."""


class NonFiniteLossError(LraError, RuntimeError):
    """The training loss became NaN or inf."""


WRITE_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the disk is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "a folder on the way does not exist",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
}


def write_reason(err: OSError) -> str | None:
    """Why a write failed, in words, for the errors a user fixes (a full or read-only disk, a bad path); else None."""
    return WRITE_REASONS.get(err.errno)


def is_oom(err: BaseException) -> bool:
    """Whether `err` is an out-of-memory error (CUDA's, or a host allocation failure)."""
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, (RuntimeError, MemoryError)) and ("out of memory" in text or "can't allocate memory" in text)
