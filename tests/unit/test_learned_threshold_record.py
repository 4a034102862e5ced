"""An entry's learned threshold in its Redis record: written in the metadata, read back, and
absent (None) from records written before learned thresholds existed."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.support.entries import make_entry
from tiers.entry_codec import META, decode_fields, encode_fields


def test_the_learned_threshold_travels_in_the_record() -> None:
    entry = replace(make_entry("a"), learned_threshold=0.87)
    assert decode_fields(encode_fields(entry, 1 << 20)).learned_threshold == 0.87
    plain = make_entry("b")
    assert decode_fields(encode_fields(plain, 1 << 20)).learned_threshold is None


def test_a_record_without_one_reads_as_none() -> None:
    fields = encode_fields(make_entry("a"), 1 << 20)
    meta = json.loads(fields[META])
    del meta["learned_threshold"]
    fields[META] = json.dumps(meta).encode()
    assert decode_fields(fields).learned_threshold is None
