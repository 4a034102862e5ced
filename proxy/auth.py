"""Client authentication and the Authorization header sent upstream.

With no upstream key configured, the client's own Authorization goes upstream unchanged (the
upstream judges it) and, when `proxy.api_keys` lists keys, only those are let in. With an
upstream key configured, the proxy spends that key on the client's behalf, so it must know who
the client is: `proxy.api_keys` is then required (config validation enforces it) and everyone
else gets a 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from core.config import ProxyConfig, UpstreamConfig
from core.errors import AuthenticationFailed


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class ClientAuth:
    def __init__(self, proxy: ProxyConfig, upstream: UpstreamConfig) -> None:
        self._keys = [k.encode() for k in proxy.api_keys]
        self._upstream_key = upstream.api_key

    @property
    def replaces_key(self) -> bool:
        return bool(self._upstream_key)

    def client_key(self, headers: Mapping[str, str]) -> str | None:
        """The client's API key (None: anonymous); raises AuthenticationFailed when refused."""
        key = bearer_token(headers)
        if not self._keys:
            return key
        if key is None:
            raise AuthenticationFailed("missing API key: send 'Authorization: Bearer <key>'")
        if not self.is_known(key):
            raise AuthenticationFailed("the API key is not valid for this proxy")
        return key

    def is_known(self, key: str) -> bool:
        candidate = key.encode()
        # Compare against every key, in constant time per key, so timing says nothing.
        found = False
        for known in self._keys:
            found |= hmac.compare_digest(candidate, known)
        return found

    def upstream_authorization(self, headers: Mapping[str, str]) -> str | None:
        if self._upstream_key:
            return f"Bearer {self._upstream_key}"
        return headers.get("Authorization")
