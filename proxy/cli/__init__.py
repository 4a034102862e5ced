"""The `deja` command.

    deja serve | config                        the proxy, its configuration (serve.py)
    deja modelserver ...                       the local model server (modelserver/cli.py)
    deja stats | entries | invalidate | feedback   the admin API of a running proxy
                                               (admin_commands.py over admin_client.py)
    deja warmup FILE                           store known answers (warmup_command.py)
    deja doctor                                check what `deja serve` needs (doctor.py)
    deja --version

This is the one place that reads os.environ; every command gets it as a mapping. An error is
one line on stderr, `deja: <what went wrong>`, and a non-zero exit status: 2 for a usage or
configuration mistake, 1 for anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import NoReturn

from core.errors import ConfigError, DejaError
from proxy.cli import admin_commands, doctor, serve, warmup_command


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "modelserver":
        from modelserver.cli import main as modelserver_main

        return modelserver_main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    if ns.command is None:
        parser.print_help()
        return 2
    ns.argv = args
    try:
        return int(ns.run(ns, os.environ))
    except ConfigError as exc:
        # `validate` finds every configuration error before anything starts; the same line
        # for one that only building the app finds (an invariant it should have held).
        print(f"deja: {exc.message}", file=sys.stderr)
        return 2
    except DejaError as exc:
        print(f"deja: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("deja: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`deja entries list | head`): not an error of ours. Python's
        # own flush of stdout at exit would fail again, so stdout goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, as a configuration error is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deja", description="Deja: a semantic cache for OpenAI-compatible APIs")
    parser.add_argument("--version", action="version", version=f"deja {version()}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    serve.register(sub)
    sub.add_parser("modelserver", help="run the local model server (see `deja modelserver --help`)")
    admin_commands.register(sub)
    warmup_command.register(sub)
    doctor.register(sub)
    return parser


def version() -> str:
    """The installed distribution's version ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version("deja")
    except metadata.PackageNotFoundError:
        return "unknown"
