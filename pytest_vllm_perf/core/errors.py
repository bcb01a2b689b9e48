"""One base error for everything the plugin reports as text rather than a traceback.

The fixture catches :class:`VllmPerfError` in one place and fails the test with
its message; the subclasses say which layer found the problem.
"""

from __future__ import annotations

__all__ = [
    "BaselineError",
    "PlotsUnavailable",
    "ProfileError",
    "PromptError",
    "ServerError",
    "ThresholdError",
    "VllmPerfError",
    "WorkloadError",
]


class VllmPerfError(Exception):
    """A problem with a clear, user-facing message: reported, never shown as a traceback."""


class ProfileError(VllmPerfError, ValueError):
    """A profile that cannot be used; the message names the file and the key."""


class WorkloadError(VllmPerfError, ValueError):
    """A workload spec that cannot be run; the message names the key."""


class ThresholdError(VllmPerfError, ValueError):
    """An unknown threshold or tolerance key."""


class ServerError(VllmPerfError, RuntimeError):
    """The server could not be started or died; the message ends with its log."""


class PromptError(VllmPerfError, RuntimeError):
    """The server could not tokenize for us, so no exact-length prompt can be made."""


class BaselineError(VllmPerfError, RuntimeError):
    """A baseline file that cannot be read or written; it is left untouched."""


class PlotsUnavailable(VllmPerfError, RuntimeError):
    """matplotlib is not installed."""
