"""Which request headers are credentials, and the tenant they make: the one rule.

    credentials(request) = every (name, value) among the request's headers whose name is
                           authorization, api-key, x-api-key or one of proxy.credential_headers
                           (names lower-cased, pairs sorted)
    tenant(request)      = TenantHasher.tenant_of_credentials(credentials(request))

`Authorization` counts whatever its scheme (Bearer, Basic, any other), by its whole value. Every
credential header counts, so none "wins": the same key in another header, another header beside
it, or the same header twice is another tenant. A request with no credential header is the
anonymous tenant, which never sees an entry stored for one that carried any.

Everything that derives a tenant comes here: the request reader (the proxy's, and edge mode's front,
whose worker reads the same headers relayed unchanged), the admin API's caller, warm-up lines and
invalidate's selectors (README, "Authentication"). proxy/http/client_auth.py checks the same
credentials against `proxy.api_keys` and decides which of them go upstream.
"""

from __future__ import annotations

from collections.abc import Iterable

from multidict import MultiMapping

from core.config import CacheConfig, ProxyConfig
from core.errors import InvalidRequest
from normalize.keys.fingerprint import TenantHasher

# (lower-cased header name, value) pairs, sorted: a request's credentials, canonical.
Credentials = tuple[tuple[str, str], ...]
# What the OpenAI SDKs (Authorization), Azure OpenAI's (api-key) and most other gateways
# (x-api-key) send; more through `proxy.credential_headers`.
BUILT_IN_HEADERS = ("authorization", "api-key", "x-api-key")


class CredentialRule:
    def __init__(self, proxy: ProxyConfig, cache: CacheConfig) -> None:
        self.names = frozenset({*BUILT_IN_HEADERS, *(n.lower() for n in proxy.credential_headers)})
        self._ordered = tuple(sorted(self.names))
        self._hasher = TenantHasher(cache.tenant_secret, cache.share_across_tenants)

    def read(self, headers: MultiMapping[str]) -> Credentials:
        """Every credential header in `headers`, repeated ones included."""
        # A lookup per credential name (a few) rather than a pass over every header: this runs
        # on every hit.
        found = [(name, value) for name in self._ordered for value in headers.getall(name, ())]
        return tuple(sorted(found)) if len(found) > 1 else tuple(found)

    def tenant(self, credentials: Credentials) -> str:
        return self._hasher.tenant_of_credentials(credentials)

    def tenant_of_key(self, api_key: str | None) -> str:
        """A bare key's tenant: it stands for `Authorization: Bearer <key>`."""
        return self._hasher.tenant_of(api_key)

    def named(self, given: object, field: str) -> Credentials:
        """The credentials an admin body or warm-up line names in `field`: an object of
        credential headers and their values, as a client's request would carry them."""
        if not isinstance(given, dict) or not given:
            raise InvalidRequest(
                f"'{field}' must be an object of credential headers and their values"
            )
        pairs = []
        for name, value in given.items():
            if name.lower() not in self.names:
                known = ", ".join(sorted(self.names))
                raise InvalidRequest(
                    f"'{field}': {name!r} is not a credential header (those are {known})"
                )
            if not isinstance(value, str):
                raise InvalidRequest(f"'{field}': the value of {name!r} must be a string")
            pairs.append((name.lower(), value))
        return tuple(sorted(pairs))


def spelled_alike(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """`headers` with every repeat of a name spelled as its first occurrence is.

    aiohttp's client keeps a repeated header only when the repeats are spelled alike
    (`ClientSession._prepare_headers` compares names case-sensitively, and a repeat spelled
    otherwise replaces the first): `api-key: a` and `API-KEY: b` would reach the edge worker or
    the upstream as `API-KEY: b` alone, another tenant than the one the front or the proxy
    derived, and not the credentials the client sent. Both relays send headers through this."""
    first: dict[str, str] = {}
    return [(first.setdefault(name.lower(), name), value) for name, value in headers]
