"""Task calls whose arguments Prefect does not walk.

Before a task runs, Prefect walks every argument, element by element, looking for futures and states to wait on and
to record as the task run's upstream inputs. The loop's tasks take the job's knowledge (every observation, forecast
and ledger entry kept), so that walk visited some 80,000 objects per loop run, about half of the run's CPU in its
main thread (cProfile over 20 runs of a fleet), and it grew with the history. The loop passes plain values, never
futures, so there is nothing to find: each argument is passed under Prefect's `quote`, which stops the walk and hands
the task the value itself. The task runs, their states and names in the UI are unchanged; Prefect does not send a
task's arguments to the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from prefect.utilities.annotations import quote

R = TypeVar("R")


def unwalked(task: Callable[..., R]) -> Callable[..., R]:
    """`task` called with every argument quoted: it still runs as a Prefect task, with the same values."""

    def call(*args: Any, **kwargs: Any) -> R:
        return task(*(quote(a) for a in args), **{k: quote(v) for k, v in kwargs.items()})

    call.__name__ = getattr(task, "name", getattr(task, "__name__", "task"))
    call.__doc__ = task.__doc__
    return call
