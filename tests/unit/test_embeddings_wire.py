"""The embeddings wire format and keys: what is keyed, how vectors are read and written."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson
import pytest

from core.errors import InvalidRequest, UpstreamProtocolError
from proxy.http.embeddings import token_shares
from proxy.protocol.embeddings import (
    parse_embeddings_request,
    read_upstream_embeddings,
    render_embeddings,
)


def keys(
    body: dict[str, Any], tenant: str = "t", headers: dict[str, str] | None = None
) -> list[str]:
    return [k.exact_key for k in parse_embeddings_request(body, tenant, headers or {}).keys]


def test_what_is_keyed_and_what_is_not() -> None:
    base = {"model": "m", "input": ["a", "b", "a"]}
    a, b, again = keys(base)
    assert a == again and a != b
    assert keys({**base, "encoding_format": "base64", "user": "u1"}) == [a, b, a]
    assert keys({**base, "dimensions": 8})[0] != a
    assert keys({**base, "model": "n"})[0] != a
    assert keys(base, tenant="other")[0] != a
    assert keys(base, headers={"X-Deja-Namespace": "ns"})[0] != a
    assert keys({**base, "input": ["a "]})[0] != a  # the bytes exactly: no canonical form
    assert keys({"model": "m", "input": [1, 2]}) == keys({"model": "m", "input": [[1, 2]]})
    assert keys({"model": "m", "input": "1,2"}) != keys({"model": "m", "input": [1, 2]})


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["a", 1]}, "input"),
        ({"model": "m", "input": [[1], []]}, "input"),
        ({"model": "m", "input": [True]}, "input"),
        ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ],
)
def test_what_cannot_be_keyed_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_embeddings_request(body, "t", {})
    assert refused.value.param == param


def upstream(data: list[Any], usage: Any = None) -> bytes:
    return orjson.dumps({"object": "list", "data": data, "model": "m", "usage": usage})


def test_upstream_vectors_are_read_as_float32_in_index_order() -> None:
    v0 = np.array([0.1, -0.25], dtype=np.float32)
    v1 = np.array([1 / 3, 2.5e-8], dtype=np.float32)
    raw = upstream(
        [
            {"index": 1, "embedding": base64.b64encode(v1.tobytes()).decode()},
            # JSON floats as OpenAI prints them: float32's shortest form.
            {"index": 0, "embedding": [0.1, -0.25]},
        ],
        {"prompt_tokens": 7, "total_tokens": 7},
    )
    answer = read_upstream_embeddings(raw, 2)
    assert answer.vectors == (v0.tobytes(), v1.tobytes())
    assert (answer.prompt_tokens, answer.total_tokens, answer.model) == (7, 7, "m")


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        upstream([{"index": 0, "embedding": [0.1]}]),  # one vector for two inputs
        upstream([{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]),
        upstream([{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": "%%%"}]),
        upstream([{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["x"]}]),
    ],
)
def test_an_answer_that_cannot_be_matched_to_the_inputs_is_a_502(raw: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        read_upstream_embeddings(raw, 2)


def test_vectors_are_written_in_the_encoding_asked() -> None:
    vector = np.array([0.1, 1 / 3, -2.5e-8], dtype=np.float32).tobytes()
    as_float = orjson.loads(render_embeddings([vector], "float", "m", 3, 3))
    as_base64 = orjson.loads(render_embeddings([vector], "base64", "m", 3, 3))
    # Each float32 in full: the float64 it equals.
    assert as_float["data"][0]["embedding"] == [float(np.float32(x)) for x in (0.1, 1 / 3, -2.5e-8)]
    assert base64.b64decode(as_base64["data"][0]["embedding"]) == vector
    assert as_float["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert np.array_equal(
        np.asarray(as_float["data"][0]["embedding"]).astype(np.float32),
        np.frombuffer(vector, np.float32),
    )


def test_token_shares_sum_to_the_total() -> None:
    assert token_shares(10, [1, 1, 1]) == [4, 3, 3]
    assert token_shares(7, [5, 2]) == [5, 2]
    assert token_shares(0, [3, 4]) == [0, 0]
    assert token_shares(5, []) == []
