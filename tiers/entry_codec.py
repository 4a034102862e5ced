"""Entry ⇄ the fields of its Redis hash (format version 1).

    m  meta: JSON of every scalar field, with "v": the format version
    b  body: one marker byte (b"j" raw, b"z" zlib) + the completion JSON (an embedding's:
       its float32 bytes, raw)
    a  analysis: the lemma analysis wire string (absent when none)
    v  vector: float32 bytes of the prompt embedding (absent when none)
    w  answer vector: float32 bytes of the answer's embedding (absent when none)
    r  rescore vector: float32 bytes of the prompt's embedding by the second model of the
       two-stage mode (absent in one-stage mode)
    t  search tag: "partition:language", beside the vector (absent without one): what Redis's
       own vector index filters a search by (`semantic.backend: redis-search`)

A record of another version, or one that cannot be parsed, raises CorruptEntry; callers treat
it as absent, so a rolling upgrade never serves a misread answer.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from core.errors import CorruptEntry
from normalize.keys.request import PARTITION_TAG_CHARS, Route
from tiers.base import ENTRY_FORMAT_VERSION, Entry

META, BODY, ANALYSIS, VECTOR, ANSWER_VECTOR, RESCORE_VECTOR = "m", "b", "a", "v", "w", "r"
SEARCH_TAG = "t"
_RAW, _ZLIB = b"j", b"z"


def encode_meta(entry: Entry) -> bytes:
    meta: dict[str, Any] = {
        "v": ENTRY_FORMAT_VERSION,
        "id": entry.entry_id,
        "route": str(entry.route),
        "tenant": entry.tenant,
        "namespace": entry.namespace,
        "model": entry.model,
        "partition": entry.partition,
        "exact_key": entry.exact_key,
        "lemma_key": entry.lemma_key,
        "stored_at": entry.stored_at,
        "ttl_s": entry.ttl_s,
        "grace_s": entry.grace_s,
        "confidence": entry.confidence,
        "certainty": entry.certainty,
        "feedback": list(entry.feedback),
        "threshold": entry.threshold,
        "learned_threshold": entry.learned_threshold,
        "prompt_tokens": entry.prompt_tokens,
        "completion_tokens": entry.completion_tokens,
    }
    if entry.prompt is not None:  # only with admin.store_prompts
        meta["prompt"] = entry.prompt
    return json.dumps(meta, separators=(",", ":")).encode()


def encode_body(body: bytes, compress_min_bytes: int) -> bytes:
    if len(body) >= compress_min_bytes:
        packed = zlib.compress(body, 1)
        if len(packed) < len(body):
            return _ZLIB + packed
    return _RAW + body


def decode_body(raw: bytes) -> bytes:
    marker, payload = raw[:1], raw[1:]
    if marker == _RAW:
        return payload
    if marker == _ZLIB:
        try:
            return zlib.decompress(payload)
        except zlib.error as exc:
            raise CorruptEntry(f"entry body does not decompress: {exc}") from exc
    raise CorruptEntry(f"unknown entry body marker {marker!r}")


def encode_fields(entry: Entry, compress_min_bytes: int) -> dict[str, bytes]:
    # An embedding's body is float32 values, which zlib shrinks by ~7% (1,536 dimensions:
    # 6,144 → 5,741 bytes) for ~0.15 ms of CPU each: kept raw.
    body = _RAW + entry.body if entry.route is Route.EMBEDDINGS else None
    fields = {META: encode_meta(entry), BODY: body or encode_body(entry.body, compress_min_bytes)}
    if entry.analysis is not None:
        fields[ANALYSIS] = entry.analysis.encode()
    if entry.vector is not None:
        fields[VECTOR] = entry.vector
        tag = _search_tag_of(entry)
        if tag is not None:
            fields[SEARCH_TAG] = tag.encode()
    if entry.answer_vector is not None:
        fields[ANSWER_VECTOR] = entry.answer_vector
    if entry.rescore_vector is not None:
        fields[RESCORE_VECTOR] = entry.rescore_vector
    return fields


def record_key(prefix: str, entry_id: str) -> str:
    """The key of an entry's hash (tiers/redis_tier.py gives the key layout): its partition's
    hash tag, which the entry id starts with, keeps it in its partition's Cluster slot."""
    return f"{prefix}:{{{entry_id[:PARTITION_TAG_CHARS]}}}:e:{entry_id}"


def search_tag(partition: str, language: str) -> str:
    """The record's search tag: a vector search looks in one partition and language, as the
    replica's FAISS indexes do (one per partition and language)."""
    return f"{partition}:{language}"


def _search_tag_of(entry: Entry) -> str | None:
    """None for an entry whose analysis cannot be read: no index searches it (the replica's
    refuses it too, tiers/semantic/tier.py)."""
    try:
        return search_tag(entry.partition, entry.language)
    except (CorruptEntry, ValueError, KeyError, TypeError):
        return None


def decode_without_body(fields: Mapping[str, bytes | None]) -> Entry:
    """An Entry from a record's fields other than its body (a search candidate's: its answer
    is read only if it is served), with an empty body."""
    whole: dict[bytes | str, bytes | None] = dict(fields.items())
    whole[BODY] = _RAW
    return decode_fields(whole)


def decode_fields(fields: Mapping[bytes | str, bytes | None]) -> Entry:
    """An Entry from a hash's fields (keys may be bytes or str, as redis-py returns them)."""
    get = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
    meta_raw, body_raw = get.get(META), get.get(BODY)
    if meta_raw is None or body_raw is None:
        raise CorruptEntry("entry record lacks its meta or body field")
    try:
        meta = json.loads(meta_raw)
    except ValueError as exc:
        raise CorruptEntry(f"entry meta is not JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("v") != ENTRY_FORMAT_VERSION:
        raise CorruptEntry(
            f"entry record has format version {meta.get('v')!r}, not {ENTRY_FORMAT_VERSION}"
        )
    analysis = get.get(ANALYSIS)
    learned = meta.get("learned_threshold")
    try:
        return Entry(
            entry_id=meta["id"],
            route=Route(meta["route"]),
            tenant=meta["tenant"],
            namespace=meta["namespace"],
            model=meta["model"],
            partition=meta["partition"],
            exact_key=meta["exact_key"],
            lemma_key=meta["lemma_key"],
            body=decode_body(body_raw),
            stored_at=float(meta["stored_at"]),
            ttl_s=float(meta["ttl_s"]),
            grace_s=float(meta["grace_s"]),
            confidence=float(meta["confidence"]),
            certainty=float(meta["certainty"]),
            feedback=tuple(float(x) for x in meta["feedback"]),
            threshold=float(meta["threshold"]),
            # Records written before learned thresholds existed carry none.
            learned_threshold=None if learned is None else float(learned),
            prompt_tokens=int(meta.get("prompt_tokens", 0)),
            completion_tokens=int(meta.get("completion_tokens", 0)),
            prompt=meta.get("prompt"),
            analysis=analysis.decode() if analysis is not None else None,
            vector=get.get(VECTOR),
            answer_vector=get.get(ANSWER_VECTOR),
            rescore_vector=get.get(RESCORE_VECTOR),
        )
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CorruptEntry(f"entry meta is incomplete or malformed: {exc!r}") from exc
