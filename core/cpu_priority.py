"""Lowering this process's CPU priority below everything else on the machine."""

from __future__ import annotations

import os

# The nice value used where the SCHED_IDLE class is not available or not permitted.
NICENESS = 19


def become_idle_priority() -> None:
    """Put this process in the SCHED_IDLE class where Linux offers and permits it: it then runs
    only on cycles nothing else wants, and any wake-up of a normal process preempts it at once
    (under EEVDF a nice-19 neighbour may keep a woken task waiting for its slice, milliseconds).
    Elsewhere, the lowest nice."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass  # not permitted here: fall back to nice
    os.nice(NICENESS)
