"""The model server's flag table in docs/modelserver.md is generated from its declaration
(modelserver/config.py) by scripts/config_reference.py, as the Deja tables are
(tests/unit/test_config.py); and the flags themselves come from the same declaration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.settings import meta
from modelserver.cli import build_parser, flags
from modelserver.config import ModelServerConfig
from scripts import config_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "modelserver.md"


def test_the_flag_table_is_generated_from_the_declaration() -> None:
    # Regenerate with `python scripts/config_reference.py --write`.
    doc = DOC.read_text()
    table = config_reference.modelserver_table()
    start, end = config_reference.FLAGS_START, config_reference.FLAGS_END
    assert doc == config_reference.with_table(doc, table, start, end)


def test_every_setting_with_a_flag_is_in_the_help_with_its_doc() -> None:
    help_text = " ".join(build_parser().format_help().split())
    declared = {f.name: meta(f) for f in dataclasses.fields(ModelServerConfig)}
    for flag in flags():
        assert flag.name in help_text
        assert " ".join(declared[flag.field].doc.split()) in help_text, flag.name
    # The two settings that are not flags: tests and the server set them.
    assert {name for name, m in declared.items() if m.flag is None} == {
        "max_body_bytes",
        "random_seed",
    }
