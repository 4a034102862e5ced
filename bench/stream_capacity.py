"""What one replication stream key costs the Redis node that holds it.

Every replica appends one event per stored entry (and per feedback update, deletion,
invalidation) to `{prefix}:events`, and every replica follows the whole stream. On a Redis
Cluster that key lives on one master, so the question is how much of that master's one core
the fleet's stream takes. This runs the replicas' own calls (`StreamReplication.publish`'s XADD
with the real event fields, and `_read_once`'s XREAD of up to 256 events) against a real
redis-server: `--writers` publishers as fast as they can, with `--readers` followers (0, 2, 8,
...) each reading every event, then once more with the most readers and the writers paced
to `--paced-rate` events/s, and takes the server's own CPU time (INFO cpu) per event
written and per event delivered to a reader.

    python -m bench.stream_capacity [--seconds 5] [--writers 8] [--readers 0,2,8,32]
                                    [--paced-rate 500]

Prints a table and one JSON line. The capacity model it reports: a fleet of N replicas each
publishing s events/s costs the node N*s*(write µs) + N*N*s*(delivery µs) of CPU per second;
one core is 1e6 µs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import redis.asyncio as aioredis

from tests.support.redis_server import RedisServer
from tiers.replication import EventKind, ReplicationEvent

KEY = "deja:v1:events"


async def server_cpu_s(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def writer(url: str, stop: asyncio.Event, counts: list[int], interval_s: float) -> None:
    client = aioredis.Redis.from_url(url)
    replica = os.urandom(8).hex()
    n = 0
    while not stop.is_set():
        event = ReplicationEvent(EventKind.ADD, f"{os.urandom(8).hex()}-{n:024x}")
        await client.xadd(KEY, event.fields(replica), maxlen=100_000, approximate=True)
        n += 1
        if interval_s:
            await asyncio.sleep(interval_s)
    counts.append(n)
    await client.aclose()


async def reader(url: str, stop: asyncio.Event, start_id: str, counts: list[int]) -> None:
    client = aioredis.Redis.from_url(url)
    last, n = start_id, 0
    while not stop.is_set():
        batches = await client.xread({KEY: last}, count=256, block=100)
        for _stream, messages in batches or []:
            for message_id, raw in messages:
                last = message_id.decode()
                ReplicationEvent.parse(raw)
                n += 1
    counts.append(n)
    await client.aclose()


async def run_once(
    url: str, seconds: float, writers: int, readers: int, rate: float = 0.0
) -> dict[str, Any]:
    """`rate`: events/s all writers together (paced); 0: as fast as they go."""
    control = aioredis.Redis.from_url(url)
    await control.delete(KEY)
    await control.xadd(KEY, {"kind": "start"})
    start_id = (await control.xrevrange(KEY, count=1))[0][0].decode()
    stop = asyncio.Event()
    written: list[int] = []
    delivered: list[int] = []
    cpu_before = await server_cpu_s(control)
    began = time.monotonic()
    interval_s = writers / rate if rate else 0.0
    tasks = [asyncio.create_task(writer(url, stop, written, interval_s)) for _ in range(writers)]
    tasks += [asyncio.create_task(reader(url, stop, start_id, delivered)) for _ in range(readers)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed_s = time.monotonic() - began
    cpu_s = await server_cpu_s(control) - cpu_before
    await control.aclose()
    events, deliveries = sum(written), sum(delivered)
    return {
        "readers": readers,
        "paced": bool(rate),
        "events_per_s": events / elapsed_s,
        "deliveries_per_s": deliveries / elapsed_s,
        "server_cpu_share": cpu_s / elapsed_s,
        "server_cpu_us": cpu_s * 1e6,
        "events": events,
        "deliveries": deliveries,
    }


def costs(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """µs of server CPU per event written, per event delivered: the no-reader run gives the
    first, the others the second (what is left of their CPU time once writes are paid; the
    most of any run, which is the paced one: every XREAD there returns about one event, the
    dearest case, and the usual one in a fleet whose replicas each store a few entries/s)."""
    base = next(r for r in rows if r["readers"] == 0 and not r["paced"])
    write_us = base["server_cpu_us"] / base["events"]
    per_delivery = [
        (r["server_cpu_us"] - write_us * r["events"]) / r["deliveries"]
        for r in rows
        if r["readers"] and r["deliveries"]
    ]
    return write_us, max(per_delivery) if per_delivery else 0.0


def fleet_events_per_s(replicas: int, write_us: float, delivery_us: float) -> float:
    """Events/s the whole fleet may publish before the stream takes one core of its node."""
    return 1e6 / (write_us + replicas * delivery_us)


async def main_async(args: argparse.Namespace) -> None:
    readers = [int(r) for r in args.readers.split(",")]
    with RedisServer() as server:
        rows = [await run_once(server.url, args.seconds, args.writers, r) for r in readers]
        rows.append(
            await run_once(server.url, args.seconds, args.writers, max(readers), args.paced_rate)
        )
    write_us, delivery_us = costs(rows)
    print("| readers | writers | events/s written | deliveries/s | server CPU |")
    print("|---|---|---|---|---|")
    for r in rows:
        pace = f"paced at {args.paced_rate:.0f}/s" if r["paced"] else "flat out"
        print(
            f"| {r['readers']} | {pace} | {r['events_per_s']:.0f} | {r['deliveries_per_s']:.0f} "
            f"| {r['server_cpu_share']:.0%} |"
        )
    print(f"\nserver CPU per event written: {write_us:.1f} µs; per delivery: {delivery_us:.2f} µs")
    print("| replicas | fleet events/s for one core | per replica |")
    print("|---|---|---|")
    fleet = {}
    for n in (3, 10, 30, 50, 100):
        total = fleet_events_per_s(n, write_us, delivery_us)
        fleet[n] = total
        print(f"| {n} | {total:.0f} | {total / n:.0f} |")
    print(
        json.dumps({"rows": rows, "write_us": write_us, "delivery_us": delivery_us, "fleet": fleet})
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--readers", default="0,2,8,32")
    parser.add_argument(
        "--paced-rate", type=float, default=500.0, help="events/s of the paced run (most readers)"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
