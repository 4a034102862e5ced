"""Runs the stub OpenAI upstream (tests/support/stub_upstream.py) as a process, for benchmarks.

python bench/stub_server.py PORT [--delay-s S] [--chunk-delay-s S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.stub_upstream import Behaviour, StubUpstream


async def serve(port: int, behaviour: Behaviour) -> None:
    stub = StubUpstream(behaviour=behaviour)
    await stub.start(port)
    try:
        await asyncio.Event().wait()
    finally:
        await stub.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument("--chunk-delay-s", type=float, default=0.0)
    args = parser.parse_args()
    behaviour = Behaviour(delay_s=args.delay_s, chunk_delay_s=args.chunk_delay_s)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, behaviour))


if __name__ == "__main__":
    main()
