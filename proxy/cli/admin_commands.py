"""`deja stats`, `deja entries`, `deja invalidate`, `deja feedback`: the admin API, printed.

Each command sends its request through `AdminClient` and prints the answer for a person, or
as the proxy's JSON with `--json`. What can go wrong is an `AdminError` by the time it gets
here; `proxy.cli.main` prints it as one line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy.cli.admin_client import AdminClient, AdminError, EntryDetail, Selector, Target
from proxy.cli.client_flags import add_client_flags, target_from
from proxy.cli.output import confirmed, duration, masked, pairs, print_json, table
from proxy.cli.stats_view import render_stats

Command = Callable[[AdminClient, argparse.Namespace, Target], Awaitable[int]]


def register(sub: Any) -> None:
    stats = _command(sub, "stats", _stats, "hits, misses, sizes, savings, the false-hit estimate")
    stats.add_argument("--json", action="store_true", help="the proxy's JSON, unchanged")

    entries = sub.add_parser("entries", help="list, show or delete cached entries")
    actions = entries.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = _command(actions, "list", _list, "the newest entries, newest first")
    listing.add_argument(
        "--tenant", metavar="ID", help="only this tenant's (its id, as entries show it)"
    )
    listing.add_argument("--namespace", metavar="NS", help="only this namespace's")
    listing.add_argument("--model", help="only this model's")
    listing.add_argument(
        "--limit", type=int, default=50, help="at most this many (1 to 1000, default 50)"
    )
    listing.add_argument("--json", action="store_true", help="the proxy's JSON, unchanged")
    show = _command(actions, "show", _show, "an entry's metadata and stored answer")
    show.add_argument("entry_id", metavar="ENTRY_ID")
    show.add_argument("--json", action="store_true", help="the proxy's JSON, unchanged")
    delete = _command(actions, "delete", _delete, "delete an entry from every tier and replica")
    delete.add_argument("entry_id", metavar="ENTRY_ID")

    invalidate = _command(
        sub, "invalidate", _invalidate, "delete every entry of a tenant, namespace or model"
    )
    who = invalidate.add_mutually_exclusive_group()
    who.add_argument(
        "--tenant-key", metavar="KEY", help="the tenant of this API key (as `Bearer KEY`)"
    )
    who.add_argument("--tenant", metavar="ID", help="a tenant id, as entries show it")
    invalidate.add_argument("--namespace", metavar="NS", help="entries under this namespace")
    invalidate.add_argument("--model", help="entries of this model")
    invalidate.add_argument("--all", action="store_true", help="every entry (alone)")
    invalidate.add_argument("-y", "--yes", action="store_true", help="do not ask for consent")
    invalidate.add_argument("--json", action="store_true", help="the proxy's JSON, unchanged")

    feedback = _command(sub, "feedback", _feedback, "report a cached answer useful or irrelevant")
    about = feedback.add_mutually_exclusive_group(required=True)
    about.add_argument("--entry", dest="entry_id", help="the entry (X-Deja-Entry)")
    about.add_argument("--request", dest="request_id", help="the request it served (X-Request-Id)")
    feedback.add_argument(
        "signal", metavar="SIGNAL", type=_signal, help="useful, irrelevant, or a number"
    )
    feedback.add_argument(
        "--api-key", default="", help="send this client key instead of the admin token"
    )
    feedback.add_argument("--json", action="store_true", help="the proxy's JSON, unchanged")


def _command(sub: Any, name: str, command: Command, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=summary)
    add_client_flags(parser)

    def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
        target = target_from(ns, environ, api_key=getattr(ns, "api_key", ""))
        return asyncio.run(_with_client(command, ns, target))

    parser.set_defaults(run=run)
    return parser


async def _with_client(command: Command, ns: argparse.Namespace, target: Target) -> int:
    async with AdminClient(target) as client:
        return await command(client, ns, target)


# --- the commands ---------------------------------------------------------------------------


async def _stats(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    stats = await client.stats()
    if ns.json:
        print_json(stats)
    else:
        print(render_stats(stats, target.url))
    return 0


async def _list(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    listing = await client.entries(ns.tenant, ns.namespace, ns.model, ns.limit)
    if ns.json:
        print_json(listing.raw)
        return 0
    if not listing.entries:
        filtered = any(f is not None for f in (ns.tenant, ns.namespace, ns.model))
        print("no entries match" if filtered else "no entries")
        return 0
    rows = [
        [
            e.entry_id,
            e.model,
            e.namespace or "-",
            e.tenant,
            duration(e.age_s),
            duration(e.ttl_s),
            "yes" if e.fresh else "stale",
            f"{e.feedback_sum:+g}" if e.feedback_sum else "0",
            e.answer,
        ]
        for e in listing.entries
    ]
    header = ["ENTRY", "MODEL", "NAMESPACE", "TENANT", "AGE", "TTL", "FRESH", "FEEDBACK"]
    print(table([*header, "ANSWER"], rows))
    print(f"{len(listing.entries)} of {listing.total} entries, newest first")
    return 0


async def _show(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    entry = await client.entry(ns.entry_id)
    if ns.json:
        print_json(entry.raw)
        return 0
    if entry.fresh:
        left = duration(entry.expires_at - time.time())
        fresh = f"yes, for {left} more (TTL {duration(entry.ttl_s)})"
    else:
        fresh = f"no: served only as a degraded answer until {_when(entry.grace_ends_at)}"
    rows = [
        ("Entry", entry.entry_id),
        ("Route", entry.route),
        ("Model", entry.model),
        ("Namespace", entry.namespace or "(none)"),
        ("Tenant", entry.tenant),
        ("Stored", f"{_when(entry.stored_at)} ({duration(entry.age_s)} ago)"),
        ("Fresh", fresh),
        ("Confidence", f"{entry.confidence:.3f} (certainty {entry.certainty:.3f})"),
        ("Feedback", ", ".join(f"{f:+g}" for f in entry.feedback) or "none"),
        ("Threshold", f"{entry.threshold:.3f}"),
        ("Found by", _found_by(entry)),
    ]
    print(pairs(rows))
    print()
    print(_answer_text(entry.completion))
    return 0


async def _delete(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    await client.delete(ns.entry_id)
    print(f"deleted {ns.entry_id} from every tier and replica")
    return 0


async def _invalidate(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    selector = Selector(ns.tenant_key, ns.tenant, ns.namespace, ns.model, everything=ns.all)
    named = any(f is not None for f in (ns.tenant_key, ns.tenant, ns.namespace, ns.model))
    if ns.all == named:
        raise AdminError(
            "name what to invalidate (--tenant-key, --tenant, --namespace, --model), or --all alone"
        )
    if not ns.yes:
        what = _described(selector)
        if selector.tenant_key is None:  # the listing takes tenant ids, never keys
            now = await client.entries(selector.tenant, selector.namespace, selector.model, 1)
            what += f" ({now.total} now)"
        question = f"Delete {what} from {target.url}, in Redis and every replica?"
        if not confirmed(question, sys.stdin, sys.stderr):
            raise AdminError("not confirmed: nothing was invalidated (--yes skips the question)")
    invalidated = await client.invalidate(selector)
    if ns.json:
        print_json({"invalidated": invalidated})
    else:
        print(f"invalidated {invalidated} entr{'y' if invalidated == 1 else 'ies'}")
    return 0


async def _feedback(client: AdminClient, ns: argparse.Namespace, target: Target) -> int:
    outcome = await client.feedback(ns.signal, entry_id=ns.entry_id, request_id=ns.request_id)
    if ns.json:
        print_json(outcome.raw)
    elif outcome.evicted:
        print(f"{outcome.entry_id}: evicted (feedback sum {outcome.feedback_sum:+g})")
    else:
        print(
            f"{outcome.entry_id}: feedback sum {outcome.feedback_sum:+g};"
            f" TTL now {duration(outcome.ttl_s)}, threshold {outcome.threshold:.3f}"
        )
    return 0


# --- helpers ----------------------------------------------------------------------------------


def _signal(text: str) -> str | float:
    if text in ("useful", "irrelevant"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not useful, irrelevant or a number"
        ) from None


def _described(selector: Selector) -> str:
    if selector.everything:
        return "EVERY cached entry"
    parts = []
    if selector.tenant_key is not None:
        parts.append(f"of the tenant of key {masked(selector.tenant_key)}")
    if selector.tenant is not None:
        parts.append(f"of tenant {selector.tenant}")
    if selector.namespace is not None:
        parts.append(f"in namespace {selector.namespace!r}")
    if selector.model is not None:
        parts.append(f"of model {selector.model!r}")
    return "every entry " + ", ".join(parts)


def _when(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def _found_by(entry: EntryDetail) -> str:
    ways = ["exact key"]
    if entry.lemma_key:
        ways.append("lemma key")
    if entry.semantic:
        ways.append("semantic search")
    return ", ".join(ways)


def _answer_text(completion: Mapping[str, Any]) -> str:
    """Each choice's text (or its tool calls), under a heading."""
    out = []
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        text = message.get("content") if message else choice.get("text")
        if not text and message.get("tool_calls"):
            names = [c.get("function", {}).get("name", "?") for c in message["tool_calls"]]
            text = "(tool calls: " + ", ".join(names) + ")"
        reason = choice.get("finish_reason")
        out.append(f"Answer {choice.get('index', 0)} (finish_reason {reason}):\n{text or ''}")
    return "\n\n".join(out) or "(no choices)"
