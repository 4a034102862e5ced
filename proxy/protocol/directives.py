"""Per-request cache controls: request headers → a typed CacheDirectives.

    Cache-Control: no-cache        skip the lookup, still store the answer (X-Deja-Cache: bypass)
    Cache-Control: no-store        look up, never store
    Cache-Control: max-age=N       accept only entries younger than N seconds
    X-Deja-Namespace: name         a partition inside the tenant
    X-Deja-Store-TTL: N            cap the stored entry's TTL at N seconds
    X-Deja-Explain: 1              say why the lookup hit or missed (X-Deja-Explain response)

Unknown Cache-Control directives are ignored (RFC 9111 §5.2); malformed values of the ones
above are a 400, so a typo never silently changes caching. X-Deja-Explain changes no caching:
`1` or `true` turns it on, any other value leaves it off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from core.errors import InvalidRequest

NAMESPACE_HEADER = "X-Deja-Namespace"
STORE_TTL_HEADER = "X-Deja-Store-TTL"
EXPLAIN_HEADER = "X-Deja-Explain"
_EXPLAIN_ON = frozenset({"1", "true"})
_NAMESPACE = re.compile(r"^[A-Za-z0-9._:/@+=-]{1,128}$")


@dataclass(frozen=True, slots=True)
class CacheDirectives:
    no_cache: bool = False
    no_store: bool = False
    max_age_s: float | None = None
    namespace: str = ""
    store_ttl_cap_s: float | None = None
    # The client asked why its lookup hit or missed (the X-Deja-Explain response header).
    explain: bool = False

    @property
    def lookup(self) -> bool:
        return not self.no_cache

    @property
    def store(self) -> bool:
        return not self.no_store


_DEFAULT = CacheDirectives()


def parse_directives(headers: Mapping[str, str]) -> CacheDirectives:
    if (
        "Cache-Control" not in headers
        and NAMESPACE_HEADER not in headers
        and STORE_TTL_HEADER not in headers
        and EXPLAIN_HEADER not in headers
    ):
        return _DEFAULT
    no_cache = no_store = False
    max_age: float | None = None
    for raw in headers.get("Cache-Control", "").split(","):
        name, _, value = raw.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            no_cache = True
        elif name == "no-store":
            no_store = True
        elif name == "max-age":
            max_age = _seconds("Cache-Control max-age", value.strip().strip('"'), allow_zero=True)
    namespace = headers.get(NAMESPACE_HEADER, "").strip()
    if namespace and not _NAMESPACE.match(namespace):
        raise InvalidRequest(
            f"{NAMESPACE_HEADER} must be 1-128 characters of letters, digits and ._:/@+=-",
            code="invalid_namespace",
        )
    cap = headers.get(STORE_TTL_HEADER)
    store_ttl_cap = (
        None if cap is None else _seconds(STORE_TTL_HEADER, cap.strip(), allow_zero=False)
    )
    explain = headers.get(EXPLAIN_HEADER, "").strip().lower() in _EXPLAIN_ON
    return CacheDirectives(no_cache, no_store, max_age, namespace, store_ttl_cap, explain)


def _seconds(name: str, value: str, *, allow_zero: bool) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidRequest(
            f"{name} must be a {'non-negative' if allow_zero else 'positive'} number of seconds,"
            f" got {value!r}"
        )
    return seconds
