"""An entry's prompt (admin.store_prompts) in its Redis record: written only when kept, read
back, and counted in the entry's in-process size."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.support.entries import make_entry
from tiers.entry_codec import META, decode_fields, encode_fields


def test_a_kept_prompt_travels_in_the_record() -> None:
    entry = replace(make_entry("a"), prompt="Is my diagnosis private?")
    assert decode_fields(encode_fields(entry, 1 << 20)).prompt == "Is my diagnosis private?"
    assert entry.size_bytes == make_entry("a").size_bytes + len("Is my diagnosis private?")


def test_without_one_the_record_has_no_prompt_field() -> None:
    fields = encode_fields(make_entry("b"), 1 << 20)
    assert "prompt" not in json.loads(fields[META])
    assert decode_fields(fields).prompt is None
