"""The stub upstream as a process of its own: the upstream of process tests and benchmarks.

    python -m tests.support.stub_process PORT [--control-port PORT] [--behaviour JSON]

It serves the OpenAI routes of tests/support/stub_upstream.py on PORT, answering as the
Behaviour fields in `--behaviour` say (`answer` is a fixed text; `inject_event` a pair). With
`--control-port`, a control API too, for fault tests that change it while it runs: `PUT
/behaviour` with a JSON object of Behaviour fields replaces how it answers; `GET /calls` counts
the completion calls it received. `StubProcess` runs it from a test and keeps the port across
kills, so the proxy in front of it sees the same upstream URL go away and come back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from aiohttp import web

from tests.support.processes import ServerProcess
from tests.support.redis_server import free_port
from tests.support.stub_upstream import Behaviour, StubUpstream

_FIELDS = {f.name for f in fields(Behaviour)}


def behaviour_of(spec: dict[str, Any]) -> Behaviour:
    unknown = set(spec) - _FIELDS
    assert not unknown, f"not Behaviour fields: {sorted(unknown)}"
    values = dict(spec)
    if "answer" in values:
        text = str(values["answer"])
        values["answer"] = lambda body: text
    if values.get("inject_event") is not None:
        values["inject_event"] = tuple(values["inject_event"])
    return Behaviour(**values)


def stub_argv(port: int, control_port: int | None = None, **behaviour: Any) -> list[str]:
    """The command that runs the stub on `port`, its control API on `control_port` if given."""
    argv = [sys.executable, "-m", "tests.support.stub_process", str(port)]
    if control_port is not None:
        argv += ["--control-port", str(control_port)]
    return [*argv, "--behaviour", json.dumps(behaviour)]


class StubProcess:
    def __init__(self, *, command_prefix: Sequence[str] = (), **behaviour: Any) -> None:
        """`command_prefix`: a command to run the stub under (the benchmarks pin it to a core)."""
        self.port = free_port()
        self.control_port = free_port()
        self._command_prefix = list(command_prefix)
        self._behaviour = behaviour
        self.process: ServerProcess | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubProcess:
        assert self.process is None or self.process.proc.poll() is not None, "already running"
        argv = [*self._command_prefix, *stub_argv(self.port, self.control_port, **self._behaviour)]
        self.process = ServerProcess("stub", argv, self.port)
        self.process.wait_ready("/v1/models", timeout_s=30)
        return self

    def kill(self) -> None:
        """SIGKILL: connections drop mid-stream, nothing is flushed."""
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait(timeout=10)

    def set_behaviour(self, **behaviour: Any) -> None:
        """Replaces the behaviour now and for later restarts."""
        self._behaviour = behaviour
        self._control("PUT", "/behaviour", behaviour)

    def calls(self) -> int:
        return int(self._control("GET", "/calls")["calls"])

    def embedding_counts(self) -> tuple[int, int]:
        """(embeddings calls, inputs in them) received so far."""
        counts = self._control("GET", "/calls")
        return int(counts["embedding_calls"]), int(counts["embedding_inputs"])

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def _control(self, method: str, path: str, payload: Any = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.control_port}{path}", data=data, method=method
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


async def serve(port: int, control_port: int | None, behaviour: Behaviour) -> None:
    stub = StubUpstream(behaviour=behaviour)
    await stub.start(port)
    control = await serve_control(stub, control_port) if control_port is not None else None
    try:
        await asyncio.Event().wait()
    finally:
        if control is not None:
            await control.cleanup()
        await stub.close()


async def serve_control(stub: StubUpstream, port: int) -> web.AppRunner:
    """The control API on `port`: how the stub answers, and how often it was asked."""

    async def put_behaviour(request: web.Request) -> web.Response:
        stub.behaviour = behaviour_of(await request.json())
        return web.json_response({"ok": True})

    async def get_calls(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "calls": stub.completion_calls(),
                "embedding_calls": len(stub.embedding_calls),
                "embedding_inputs": sum(map(len, stub.embedding_calls)),
            }
        )

    control = web.Application()
    control.router.add_put("/behaviour", put_behaviour)
    control.router.add_get("/calls", get_calls)
    runner = web.AppRunner(control)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--control-port", type=int, help="serve the control API here")
    parser.add_argument("--behaviour", default="{}", help="Behaviour fields as JSON")
    args = parser.parse_args()
    behaviour = behaviour_of(json.loads(args.behaviour))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    asyncio.run(serve(args.port, args.control_port, behaviour))


if __name__ == "__main__":
    main()
