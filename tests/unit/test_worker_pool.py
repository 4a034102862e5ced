"""The shared workers' addresses as a front chooses them: round robin over every address a name
resolves to, an address that failed skipped for a window that doubles while it keeps failing,
names resolved again without forgetting who failed, and the edge settings' checks."""

from __future__ import annotations

import pytest

from core.clock import ManualClock
from core.config import EdgeConfig
from core.config_loader import load_config
from core.errors import ConfigError
from proxy.edge.worker_pool import WorkerPool, WorkerTarget

SECRET = "s" * 16


class Names:
    """The resolver: what each name stands for now."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def __call__(self, host: str, port: int) -> list[str]:
        if host not in self.table:
            raise OSError(f"cannot resolve {host}")
        return self.table[host]


def pool_of(names: Names, *urls: str) -> tuple[WorkerPool, ManualClock]:
    clock = ManualClock()
    config = EdgeConfig(worker_urls=urls, retry_min_s=0.5, retry_max_s=2.0)
    return WorkerPool(config, clock, names), clock


def addresses(targets: list[WorkerTarget]) -> list[str]:
    return [t.address for t in targets]


async def test_requests_go_round_the_addresses_of_one_name() -> None:
    pool, _ = pool_of(
        Names({"deja-worker": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}), "tcp://deja-worker:8090"
    )
    await pool.refresh()
    firsts = [addresses(pool.targets())[0] for _ in range(4)]
    assert firsts == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"]
    # Each request may fall back on every other address, in order.
    assert addresses(pool.targets()) == ["10.0.0.2", "10.0.0.3", "10.0.0.1"]
    target = pool.targets()[0]
    assert (target.name, target.port, target.base_url("https")) == (
        "deja-worker",
        8090,
        "https://10.0.0.3:8090",
    )


async def test_a_failing_address_is_skipped_for_a_window_that_doubles_up_to_the_most() -> None:
    pool, clock = pool_of(Names({"a": ["10.0.0.1"], "b": ["10.0.0.2"]}), "tcp://a:1", "tcp://b:2")
    await pool.refresh()
    a, _b = pool.known
    pool.failed(a, "refused")
    assert addresses(pool.targets()) == ["10.0.0.2"]
    clock.advance(0.5)
    assert sorted(addresses(pool.targets())) == ["10.0.0.1", "10.0.0.2"]
    windows = []
    for _ in range(4):
        pool.failed(a, "refused")
        start = clock.monotonic()
        while "10.0.0.1" not in addresses(pool.targets()):
            clock.advance(0.25)
        windows.append(clock.monotonic() - start)
    assert windows == [1.0, 2.0, 2.0, 2.0]  # 0.5 was the first; at most retry_max_s
    pool.succeeded(a)
    pool.failed(a, "refused")
    clock.advance(0.5)
    assert "10.0.0.1" in addresses(pool.targets())  # a success forgot the failures


async def test_every_address_failing_leaves_nothing_to_try() -> None:
    pool, clock = pool_of(Names({"a": ["10.0.0.1", "10.0.0.2"]}), "tcp://a:1")
    await pool.refresh()
    for target in pool.known:
        pool.failed(target, "timed out")
    assert pool.targets() == []
    clock.advance(0.5)
    assert len(pool.targets()) == 2


async def test_resolving_again_keeps_the_windows_and_a_name_that_fails_keeps_its_addresses() -> (
    None
):
    names = Names({"a": ["10.0.0.1", "10.0.0.2"]})
    pool, _ = pool_of(names, "tcp://a:1")
    await pool.refresh()
    first, _second = pool.known
    pool.failed(first, "refused")
    names.table["a"] = ["10.0.0.1", "10.0.0.3"]  # a pod replaced
    await pool.refresh()
    assert sorted(t.address for t in pool.known) == ["10.0.0.1", "10.0.0.3"]
    assert "10.0.0.1" not in addresses(pool.targets())  # still skipped
    del names.table["a"]  # DNS down
    await pool.refresh()
    assert sorted(t.address for t in pool.known) == ["10.0.0.1", "10.0.0.3"]


async def test_a_name_that_never_resolved_leaves_nothing_to_try() -> None:
    pool, _ = pool_of(Names({}), "tcp://nowhere:1")
    await pool.refresh()
    assert pool.targets() == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DEJA_EDGE__WORKER_URLS": "tcp://w:8090", "DEJA_EDGE__SHARED_SECRET": SECRET},
            "edge.worker_urls is set but server.edge is off",
        ),
        (
            {"DEJA_SERVER__EDGE": "true", "DEJA_EDGE__WORKER_URLS": "tcp://w:8090"},
            "edge.worker_urls needs edge.shared_secret",
        ),
        (
            {"DEJA_SERVER__EDGE": "true", "DEJA_EDGE__WORKER_URLS": "http://w:8090"},
            "edge.worker_urls[0] must be tcp://host:port",
        ),
        (
            {"DEJA_SERVER__EDGE": "true", "DEJA_EDGE__WORKER_URLS": "tcp://w"},
            "edge.worker_urls[0] needs a host and a port",
        ),
        ({"DEJA_EDGE__SHARED_SECRET": "short"}, "edge.shared_secret must be at least 16"),
        ({"DEJA_EDGE__WORKER_LISTEN": "8090"}, "edge.worker_listen must be host:port"),
        ({"DEJA_EDGE__TLS_CERT": "/etc/hosts"}, "edge.tls_cert and edge.tls_key go together"),
        ({"DEJA_EDGE__TLS_CA": "/no/such/ca.pem"}, "edge.tls_ca is not a file"),
    ],
)
def test_edge_settings_that_could_not_work_stop_the_start(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(environ={"DEJA_REDIS__URL": "redis://127.0.0.1:6379/0", **env})


def test_a_front_of_shared_workers_is_a_valid_configuration() -> None:
    config = load_config(
        environ={
            "DEJA_REDIS__URL": "redis://127.0.0.1:6379/0",
            "DEJA_SERVER__EDGE": "true",
            "DEJA_EDGE__WORKER_URLS": "tcp://deja-worker:8090,tcp://10.0.0.9:8090",
            "DEJA_EDGE__SHARED_SECRET": SECRET,
        }
    )
    assert config.edge.worker_urls == ("tcp://deja-worker:8090", "tcp://10.0.0.9:8090")
