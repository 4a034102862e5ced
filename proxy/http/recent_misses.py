"""The last misses of this process and why they missed, for the dashboard.

A bounded ring: each miss is one small record of what the request was (its id, route, model,
namespace, tenant hash) and of its lookup's explanation (the numbers X-Deja-Explain sends:
the nearest candidate's similarity, the threshold it needed, the guard or reason that refused
it). Nothing of any entry's text is kept, nor the miss's own prompt: the nearest candidate is
only ever a number here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from core.clock import Clock
from tiers.base import LookupExplanation


@dataclass(frozen=True, slots=True)
class MissRecord:
    at_s: float  # wall-clock time of the miss
    request_id: str
    route: str
    model: str
    namespace: str
    tenant: str
    similarity: float | None  # the nearest semantic candidate's, when one was compared
    threshold: float | None  # what that candidate needed
    refused: str | None  # the guard or check that refused it, or why none was looked at


class RecentMisses:
    def __init__(self, clock: Clock, capacity: int = 100) -> None:
        assert capacity >= 1, "the ring holds at least one miss"
        self._clock = clock
        self._records: deque[MissRecord] = deque(maxlen=capacity)

    def missed(
        self,
        request_id: str,
        route: str,
        model: str,
        namespace: str,
        tenant: str,
        explanation: LookupExplanation | None,
    ) -> None:
        why = explanation or LookupExplanation()
        self._records.append(
            MissRecord(
                at_s=self._clock.time(),
                request_id=request_id,
                route=route,
                model=model,
                namespace=namespace,
                tenant=tenant,
                similarity=why.similarity,
                threshold=why.threshold,
                refused=str(why.refused) if why.refused is not None else None,
            )
        )

    def newest_first(self) -> Sequence[MissRecord]:
        return tuple(reversed(self._records))
