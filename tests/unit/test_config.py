"""Configuration: defaults < file < environment < flags, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import DejaConfig
from core.config_loader import load_config
from core.errors import ConfigError
from scripts import config_reference

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "deja.yaml"
README = SHIPPED.parents[1] / "README.md"


def test_the_shipped_file_is_generated_from_the_declaration() -> None:
    # Regenerate with `python scripts/config_reference.py --write`.
    assert SHIPPED.read_text() == config_reference.deja_yaml()
    assert load_config(SHIPPED) == DejaConfig()


def test_the_readme_table_is_generated_from_the_declaration() -> None:
    readme = README.read_text()
    assert config_reference.TABLE_START in readme and config_reference.TABLE_END in readme
    assert readme == config_reference.with_table(readme, config_reference.deja_table())


def test_layers_override_in_order(tmp_path: Path) -> None:
    path = tmp_path / "deja.yaml"
    path.write_text("server: {port: 9000, host: 0.0.0.0}\nredis: {url: redis://file:1/0}\n")
    env = {
        "DEJA_SERVER__PORT": "9100",
        "DEJA_LRU_K__MAX_ENTRIES": "5",
        "DEJA_PROXY__API_KEYS": "a, b",
    }
    config = load_config(path, env, {"server": {"port": 9200}})
    assert config.server.port == 9200  # flag
    assert config.server.host == "0.0.0.0"  # file
    assert config.redis.url == "redis://file:1/0"
    assert config.lru_k.max_entries == 5  # environment
    assert config.proxy.api_keys == ("a", "b")


def test_env_aliases() -> None:
    config = load_config(
        None, {"DEJA_UPSTREAM_URL": "http://u:1/v1", "DEJA_REDIS_URL": "redis://r:2/0"}
    )
    assert (config.upstream.url, config.redis.url) == ("http://u:1/v1", "redis://r:2/0")


def test_booleans_from_the_environment() -> None:
    assert load_config(None, {"DEJA_SEMANTIC__ENABLED": "off"}).semantic.enabled is False
    with pytest.raises(ConfigError, match=r"semantic\.enabled must be true or false"):
        load_config(None, {"DEJA_SEMANTIC__ENABLED": "maybe"})


@pytest.mark.parametrize(
    "env,message",
    [
        ({"DEJA_SERVR__PORT": "1"}, "unknown config section 'servr' (did you mean 'server'?)"),
        ({"DEJA_SERVER__PROT": "1"}, "unknown config key server.prot (did you mean 'port'?)"),
        ({"DEJA_SERVER__PORT": "eighty"}, "server.port must be an integer"),
        ({"DEJA_SERVER__PORT": "70000"}, "server.port must be 1..65535"),
        ({"DEJA_UPSTREAM__URL": "http://x:1"}, "did you mean http://x:1/v1?"),
        ({"DEJA_UPSTREAM__API_KEY": "sk"}, "proxy.api_keys must list the client keys"),
        ({"DEJA_REDIS__URL": "http://x"}, "redis.url must be a redis:// URL"),
        ({"DEJA_SERVER__EDGE": "true"}, "server.edge needs redis.url"),
        ({"DEJA_LRU_K__K": "0"}, "lru_k.k must be at least 1"),
        ({"DEJA_SEMANTIC__THRESHOLD": "1.5"}, "semantic.threshold must be in"),
        ({"DEJA_TTL__BASE_TTL_S": "nan"}, "ttl.base_ttl_s must be finite"),
    ],
)
def test_invalid_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, env)
    assert message in info.value.message


def test_bad_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    flat = tmp_path / "flat.yaml"
    flat.write_text("port: 80\n")
    with pytest.raises(ConfigError, match="must map section names"):
        load_config(flat)


def test_price_table_entries_are_typed(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "pricing: {models: [{model: a, prompt_per_1k_usd: 1, completion_per_1k_usd: 2}]}\n"
    )
    price = load_config(path).pricing.models[0]
    assert (price.model, price.prompt_per_1k_usd, price.completion_per_1k_usd) == ("a", 1.0, 2.0)
