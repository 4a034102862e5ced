"""The credential rule's parts: which headers are read, the keyed hash of what a request carries
(canonical: case, order and framing cannot make two different credential sets one tenant), the
key a credential presents to `proxy.api_keys`, and the names `proxy.credential_headers` may
hold."""

from __future__ import annotations

import base64

import pytest
from multidict import CIMultiDict

from core.config import CacheConfig, ProxyConfig
from core.config_loader import build_config, validate
from core.errors import ConfigError
from normalize.keys.fingerprint import ANONYMOUS_TENANT, SHARED_TENANT, TenantHasher
from proxy.http.client_auth import presented_key
from proxy.protocol.credentials import CredentialRule


def rule(*extra: str, shared: bool = False) -> CredentialRule:
    return CredentialRule(
        ProxyConfig(credential_headers=extra),
        CacheConfig(tenant_secret="secret", share_across_tenants=shared),
    )


def test_the_credential_headers_are_read_whatever_their_case_and_order() -> None:
    headers = CIMultiDict(
        [
            ("X-Api-Key", "b"),
            ("Content-Type", "application/json"),
            ("Authorization", "Bearer a"),
            ("API-KEY", "c"),
            ("api-key", "a"),
            ("X-Goog-Api-Key", "g"),
        ]
    )
    assert rule().read(headers) == (
        ("api-key", "a"),
        ("api-key", "c"),
        ("authorization", "Bearer a"),
        ("x-api-key", "b"),
    )
    assert rule("X-GOOG-api-key").read(headers)[-1] == ("x-goog-api-key", "g")
    assert rule().read(CIMultiDict([("Cookie", "k")])) == ()


def test_the_tenant_is_a_keyed_hash_of_every_credential() -> None:
    hasher = TenantHasher("secret")
    one = hasher.tenant_of_credentials((("api-key", "k"),))
    assert one == hasher.tenant_of_credentials((("API-Key", "k"),))
    assert one != hasher.tenant_of_credentials((("x-api-key", "k"),))
    assert one != TenantHasher("other").tenant_of_credentials((("api-key", "k"),))
    assert "k" not in one and len(one) == 32
    pair = hasher.tenant_of_credentials((("api-key", "a"), ("x-api-key", "b")))
    assert pair == hasher.tenant_of_credentials((("x-api-key", "b"), ("api-key", "a")))
    assert pair not in (one, hasher.tenant_of_credentials((("api-key", "a"),)))
    # No framing ambiguity: a value cannot pass for a name/value boundary.
    assert hasher.tenant_of_credentials((("a", "bc"),)) != hasher.tenant_of_credentials(
        (("ab", "c"),)
    )
    assert hasher.tenant_of_credentials((("a", "b"), ("a", "c"))) != hasher.tenant_of_credentials(
        (("a", "b\x00a\x00c"),)
    )
    assert hasher.tenant_of_credentials(()) == ANONYMOUS_TENANT
    shared = TenantHasher("secret", share_across_tenants=True)
    assert shared.tenant_of_credentials((("api-key", "k"),)) == SHARED_TENANT


def test_a_bare_key_stands_for_its_bearer_authorization() -> None:
    hasher = TenantHasher("secret")
    assert hasher.tenant_of("sk-a") == hasher.tenant_of_credentials(
        (("authorization", "Bearer sk-a"),)
    )
    assert hasher.tenant_of(None) == hasher.tenant_of("") == ANONYMOUS_TENANT


def test_a_header_with_any_value_is_a_credential_even_an_empty_one() -> None:
    r = rule()
    empty = r.tenant(r.read(CIMultiDict([("api-key", "")])))
    assert empty not in (ANONYMOUS_TENANT, r.tenant(r.read(CIMultiDict([("x-api-key", "")]))))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "name,value,key",
    [
        ("authorization", "Bearer sk-a", "sk-a"),
        ("authorization", "bearer   sk-a ", "sk-a"),
        ("authorization", "Bearer", None),
        ("authorization", f"Basic {b64('user:sk-a')}", "sk-a"),
        ("authorization", f"Basic {b64('sk-a:')}", "sk-a"),
        ("authorization", f"basic {b64('sk-a:p:q')}", "p:q"),
        ("authorization", f"Basic {b64('no colon')}", None),
        ("authorization", "Basic %%%", None),
        ("authorization", "Basic " + base64.b64encode(b"u:\xff").decode(), None),
        ("authorization", "sk-a", "sk-a"),
        ("authorization", "Token sk-a", "Token sk-a"),
        ("api-key", "sk-a", "sk-a"),
        ("x-api-key", "sk-a", "sk-a"),
        ("x-goog-api-key", "sk-a", "sk-a"),
        ("api-key", "", ""),
    ],
)
def test_the_key_each_credential_presents(name: str, value: str, key: str | None) -> None:
    assert presented_key(name, value) == key


@pytest.mark.parametrize(
    "names,problem",
    [
        (["x goog"], "not a valid header name"),
        ([""], "not a valid header name"),
        (["Host"], "cannot be a credential header"),
        (["Content-Length"], "cannot be a credential header"),
        (["proxy-authorization"], "cannot be a credential header"),
        (["X-Request-Id"], "cannot be a credential header"),
        (["cache-control"], "cannot be a credential header"),
        (["X-Deja-Namespace"], "cannot be a credential header"),
    ],
)
def test_credential_header_names_are_validated(names: list[str], problem: str) -> None:
    config = build_config({"proxy": {"credential_headers": names}})
    with pytest.raises(ConfigError, match=r"proxy\.credential_headers") as raised:
        validate(config)
    assert problem in str(raised.value)


def test_good_credential_header_names_pass() -> None:
    validate(build_config({"proxy": {"credential_headers": ["X-Goog-Api-Key", "api-key"]}}))
    config = build_config({"proxy": {"credential_headers": "x-a, X-B"}})
    assert config.proxy.credential_headers == ("x-a", "X-B")
