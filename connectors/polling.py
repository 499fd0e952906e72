"""Waiting for the outside to show a change (a rescale running, a process gone): one policy, through tenacity.

Each connector states its own retry policy for its requests in one `tenacity.Retrying`; what they share is this
wait: ask at once, then after pauses growing from `first` (doubling) to `most`, never sleeping past the timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, retry_if_result, stop_before_delay, wait_exponential

T = TypeVar("T")


def poll(probe: Callable[[], tuple[bool, T]], timeout_s: float, sleep: Callable[[float], None], first: float = 0.25,
         most: float = 2.0) -> tuple[bool, T]:
    """`probe` until it answers (True, …) or `timeout_s` has passed; its last answer. An error it raises ends the
    wait and reaches the caller."""
    policy = Retrying(retry=retry_if_result(lambda r: not r[0]), wait=wait_exponential(multiplier=first, max=most),
                      stop=stop_before_delay(timeout_s), sleep=sleep,
                      retry_error_callback=lambda rs: rs.outcome.result())  # type: ignore[union-attr]
    return policy(probe)
