"""Settings declared once (core/settings.py): every key has a one-line doc, and each declared bound
is what the loader enforces, in one line naming the key."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.config import DejaConfig
from core.config_loader import load_config
from core.errors import ConfigError
from core.settings import Bounds, bound_problems, meta, setting


def _keys() -> list[tuple[str, str, dataclasses.Field[Any]]]:
    return [
        (section.name, f.name, f)
        for section in dataclasses.fields(DejaConfig)
        for f in dataclasses.fields(getattr(DejaConfig(), section.name))
    ]


def _past_each_bound() -> list[tuple[str, Any]]:
    """(key, a value just outside one of its bounds) for every bounded key."""
    cases: list[tuple[str, Any]] = []
    for section, key, f in _keys():
        bounds, name = meta(f).bounds, f"{section}.{key}"
        step = 1 if isinstance(f.default, int) else 0.001
        if bounds.choices:
            cases.append((name, "not-a-choice"))
        for limit, outside in (
            (bounds.ge, -step),
            (bounds.gt, 0),
            (bounds.le, step),
            (bounds.lt, 0),
        ):
            if limit is not None:
                cases.append((name, limit + outside))
    return cases


PAST = _past_each_bound()


def _problem(name: str, value: Any) -> str:
    section, key = name.split(".")
    # The semantic tier off: no model files are looked for (a key of its own may turn it on).
    layer: dict[str, dict[str, Any]] = {"semantic": {"enabled": False}}
    layer.setdefault(section, {})[key] = value
    try:
        load_config(None, None, layer)
    except ConfigError as exc:
        return exc.message
    return ""


def test_every_key_has_a_one_line_doc() -> None:
    for section, key, f in _keys():
        doc = meta(f).doc
        assert doc.strip() and "\n" not in doc and "|" not in doc, f"{section}.{key}: {doc!r}"


def test_the_simple_ranges_are_declared() -> None:
    # The generic check below is only as good as the declaration: these were in `validate`.
    assert len(PAST) >= 70, len(PAST)


@pytest.mark.parametrize("name,value", PAST, ids=[f"{n}={v}" for n, v in PAST])
def test_a_value_past_a_declared_bound_is_refused_naming_its_key(name: str, value: Any) -> None:
    message = _problem(name, value)
    assert f"{name} must be" in message, message
    assert "\n" not in message


def test_a_value_on_an_inclusive_bound_is_accepted() -> None:
    for section, key, f in _keys():
        bounds = meta(f).bounds
        for limit in (bounds.ge, bounds.le):
            if limit is not None:
                # Another key may still object (threshold_min = 1 is above threshold_max).
                refusal = f"{section}.{key} must be {bounds.describe(isinstance(limit, int))}"
                message = _problem(f"{section}.{key}", limit)
                assert refusal not in message, message


def test_the_messages_read_as_before() -> None:
    assert Bounds(ge=1, le=65535).describe(whole=True) == "1..65535"
    assert Bounds(ge=0, le=2).describe() == "in 0..2"
    assert Bounds(gt=0, le=1).describe() == "in (0, 1]"
    assert Bounds(gt=0, lt=1).describe() == "in (0, 1)"
    assert Bounds(gt=0).describe() == "positive"
    assert Bounds(ge=0).describe() == "0 or more"
    assert Bounds(ge=2).describe() == "at least 2"
    assert Bounds(choices=("a", "b")).describe() == "one of a, b"


def test_list_entries_and_optional_values_are_checked() -> None:
    @dataclasses.dataclass(frozen=True)
    class Item:
        weight: float = setting(1.0, "a weight", ge=0)

    @dataclasses.dataclass(frozen=True)
    class Holder:
        items: tuple[Item, ...] = setting((), "entries")
        limit: int | None = setting(None, "optional", ge=2)

    assert list(bound_problems(Holder((Item(), Item(-1.0))))) == [
        "items[1].weight must be 0 or more, got -1.0"
    ]
    assert list(bound_problems(Holder(limit=1))) == ["limit must be at least 2, got 1"]
