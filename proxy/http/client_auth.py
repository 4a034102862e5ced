"""Client authentication and the credentials sent upstream.

With no upstream key configured, the client's credential headers go upstream unchanged (the
upstream judges them) and, when `proxy.api_keys` lists keys, only those are let in. With an
upstream key configured, the proxy spends that key on the client's behalf, so it must know who
the client is: `proxy.api_keys` is then required (config validation enforces it), everyone
else gets a 401, and no credential header of the client's goes upstream, only the proxy's key.

The credentials are the ones the tenant is made of (proxy/protocol/credentials.py). Each presents a
key to `proxy.api_keys` (`presented_key`), and every one of them must be known: the tenant and the
upstream read them all, so a known key must not carry an unknown one in beside it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping

from multidict import MultiMapping

from core.config import ProxyConfig, UpstreamConfig
from core.errors import AuthenticationFailed
from proxy.protocol.credentials import CredentialRule, Credentials, spelled_alike
from proxy.upstream.client import forward_headers


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer` header (the admin token's only form)."""
    value = headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def presented_key(name: str, value: str) -> str | None:
    """The key the credential header `name` (lower-case) presents; None when it presents none.

    Authorization: Bearer's token; Basic's password (its user name when the password is empty,
    as `curl -u key:` sends it); any other value whole (`Authorization: sk-…` is the key
    `sk-…`, `Token sk-…` is not). Every other credential header: its whole value."""
    if name != "authorization":
        return value
    scheme, _, rest = value.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return rest.strip() or None
    if scheme == "basic":
        return _basic_key(rest.strip())
    return value


def _basic_key(encoded: str) -> str | None:
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon:
        return None
    return password or user


class ClientAuth:
    def __init__(self, proxy: ProxyConfig, upstream: UpstreamConfig, rule: CredentialRule) -> None:
        self._keys = [k.encode() for k in proxy.api_keys]
        self._upstream_key = upstream.api_key
        self._rule = rule

    def credentials(self, headers: MultiMapping[str]) -> Credentials:
        """The client's credentials (none: anonymous), checked against `proxy.api_keys` when
        it lists keys; raises AuthenticationFailed when refused."""
        credentials = self._rule.read(headers)
        if self._keys:
            self._check(credentials)
        return credentials

    def _check(self, credentials: Credentials) -> None:
        if not credentials:
            raise AuthenticationFailed(
                "missing API key: send 'Authorization: Bearer <key>' (or 'api-key: <key>')"
            )
        known = True
        for name, value in credentials:
            key = presented_key(name, value)
            known &= key is not None and self._is_known(key)
        if not known:
            raise AuthenticationFailed("the API key is not valid for this proxy")

    def _is_known(self, key: str) -> bool:
        candidate = key.encode("utf-8", "surrogatepass")
        # Compare against every key, in constant time per key, so timing says nothing.
        found = False
        for known in self._keys:
            found |= hmac.compare_digest(candidate, known)
        return found

    def upstream_headers(
        self, headers: Mapping[str, str], drop: frozenset[str]
    ) -> list[tuple[str, str]]:
        """The client's headers to send upstream, less `drop`: its credential headers as they
        came, or, in replacement mode, none of them and the proxy's own key instead (so a
        client's internal key never reaches the provider)."""
        if not self._upstream_key:
            return spelled_alike(forward_headers(headers, drop))
        kept = spelled_alike(forward_headers(headers, drop | self._rule.names))
        kept.append(("Authorization", f"Bearer {self._upstream_key}"))
        return kept
