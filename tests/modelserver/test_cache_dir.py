"""The one model cache directory: `--cache-dir`, else $DEJA_MODEL_CACHE_DIR, else
$XDG_CACHE_HOME/deja/models, else ~/.cache/deja/models; read by the CLI, nowhere deeper."""

from __future__ import annotations

from pathlib import Path

from modelserver.cli import build_parser, config_from_args, default_cache_dir
from modelserver.config import ModelServerConfig


def cache_dir_of(argv: list[str], environ: dict[str, str]) -> Path:
    return config_from_args(build_parser(environ).parse_args(argv)).cache_dir


def test_without_flag_or_environment_it_is_the_documented_default() -> None:
    assert cache_dir_of([], {}) == Path("~/.cache/deja/models") == ModelServerConfig().cache_dir


def test_the_environment_variable_sets_it() -> None:
    # What deploy/Dockerfile sets: its system user has no home for ~/.cache.
    environ = {"DEJA_MODEL_CACHE_DIR": "/var/cache/deja/models"}
    assert cache_dir_of([], environ) == Path("/var/cache/deja/models")


def test_xdg_cache_home_is_the_fallback_before_the_home_folder() -> None:
    assert cache_dir_of([], {"XDG_CACHE_HOME": "/srv/cache"}) == Path("/srv/cache/deja/models")
    both = {"XDG_CACHE_HOME": "/srv/cache", "DEJA_MODEL_CACHE_DIR": "/models"}
    assert cache_dir_of([], both) == Path("/models")


def test_the_flag_beats_the_environment() -> None:
    environ = {"DEJA_MODEL_CACHE_DIR": "/var/cache/deja/models", "XDG_CACHE_HOME": "/srv"}
    assert cache_dir_of(["--cache-dir", "/tmp/c"], environ) == Path("/tmp/c")


def test_empty_variables_count_as_unset() -> None:
    # `DEJA_MODEL_CACHE_DIR=` in a compose file must not make the cache the working directory.
    environ = {"DEJA_MODEL_CACHE_DIR": "", "XDG_CACHE_HOME": ""}
    assert default_cache_dir(environ) == Path("~/.cache/deja/models")
