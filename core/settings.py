"""A setting declared once: its default, its one-line doc and its simple bounds, on the field.

`setting(8080, "port the proxy listens on", ge=1, le=65535)` is a dataclass field whose metadata
holds the rest, so the loader's range checks, `config/deja.yaml`, the README table and the model
server's flags are all read from the declaration (scripts/config_reference.py writes the files).
Checks across fields, or needing files, packages or parsing, stay as code (core/config_checks.py,
ModelServerConfig.__post_init__).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import MISSING, dataclass
from typing import Any

# Pass as the default of a setting that has none (each entry of a list, such as ModelPrice).
REQUIRED: Any = MISSING

_META = "deja.setting"


@dataclass(frozen=True, slots=True)
class Bounds:
    """Inclusive (ge, le) and exclusive (gt, lt) limits of a number, or the values a string may
    take. Empty: anything of the field's type."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()

    def admits(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )

    def describe(self, whole: bool = False) -> str:
        """What an admitted value is, as the end of "X must be ...": `1..65535` (a `whole`
        number), `in 0..1`, `in (0, 1]`, `positive`, `0 or more`, `at least 2`, `one of a, b`."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        low, high = _first(self.ge, self.gt), _first(self.le, self.lt)
        if low is not None and high is not None:
            if self.ge is not None and self.le is not None:
                closed = f"{_number(low)}..{_number(high)}"
                return closed if whole else f"in {closed}"
            opening = "[" if self.ge is not None else "("
            closing = "]" if self.le is not None else ")"
            return f"in {opening}{_number(low)}, {_number(high)}{closing}"
        if self.gt is not None:
            return "positive" if self.gt == 0 else f"more than {_number(self.gt)}"
        if self.ge is not None:
            return "0 or more" if self.ge == 0 else f"at least {_number(self.ge)}"
        if self.lt is not None:
            return f"less than {_number(self.lt)}"
        assert self.le is not None, "describe() of a Bounds without limits"
        return f"at most {_number(self.le)}"

    def __bool__(self) -> bool:
        return bool(self.choices) or any(
            limit is not None for limit in (self.ge, self.gt, self.le, self.lt)
        )


@dataclass(frozen=True, slots=True)
class Meta:
    """What a setting says about itself besides its default."""

    doc: str
    bounds: Bounds
    # The command-line flag, for a config that generates its flags (the model server's):
    # "" is `--<name with dashes>`, None none.
    flag: str | None = ""


def setting(
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] = (),
    flag: str | None = "",
) -> Any:
    """A dataclass field with its doc and bounds; typed Any so `port: int = setting(...)` checks."""
    assert doc and "\n" not in doc, f"a setting's doc is one line: {doc!r}"
    assert not isinstance(default, list | dict | set), "a setting's default must be immutable"
    meta = Meta(doc, Bounds(ge, gt, le, lt, tuple(choices)), flag)
    return dataclasses.field(default=default, metadata={_META: meta})


def meta(field: dataclasses.Field[Any]) -> Meta:
    found = field.metadata.get(_META)
    assert isinstance(found, Meta), f"config field {field.name} is not declared with setting()"
    return found


def bound_problems(config: Any, prefix: str = "") -> Iterator[str]:
    """ "<key> must be <bounds>, got <value>" for each value outside its declared bounds, in the
    sections (dataclass fields) and list entries (tuples of dataclasses) too."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        name = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            yield from bound_problems(value, f"{name}.")
            continue
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from bound_problems(item, f"{name}[{i}].")
            continue
        bounds = meta(field).bounds
        # None is "not set" for the optional settings (the model server's max_model_len).
        if bounds and value is not None and not bounds.admits(value):
            whole = isinstance(value, int) and not isinstance(value, bool)
            yield f"{name} must be {bounds.describe(whole)}, got {value!r}"


def _first(*limits: float | None) -> float | None:
    return next((limit for limit in limits if limit is not None), None)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
