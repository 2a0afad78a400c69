"""The `lra` command: one sub-command per module in `lra/commands/`.

Each command module exposes `add_parser(subparsers)` (registers its arguments and sets
`func=run`) and `run(args) -> int`. Building the parser imports no torch, Triton, Lightning,
pandas or matplotlib (`lra.commands.parser`): a command imports what it needs when it runs.

Option names follow one scheme in every command (docs/interfaces.md, "Command line"): the same
flag for the same thing (`--runs-dir`, `--data-dir`, `--out` for what a command writes), a plural
flag takes a space-separated list (`--tasks listops text`), a singular one exactly one value.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from lra.commands.parser import Parser

# Order is the order `lra --help` lists them in.
COMMANDS = ("info", "data", "train", "eval", "sweep", "bench", "table", "plot", "transfer")


def version() -> str:
    """The installed distribution's version, else the package's `__version__`."""
    from importlib import metadata

    try:
        return metadata.version("lra")
    except metadata.PackageNotFoundError:
        from lra import __version__

        return __version__


class PrintVersion(argparse.Action):
    """`--version`: print `lra <version>` and exit 0 (the version is looked up only then)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"lra {version()}")
        parser.exit()


def build_parser() -> Parser:
    parser = Parser(
        prog="lra",
        description="Long Range Arena harness: exact (Flash) vs approximate attention.",
    )
    parser.add_argument("--version", action=PrintVersion, help="print the version of lra and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"lra.commands.{name}")
        module.add_parser(sub)
    return parser


def interruptible() -> None:
    """Make SIGINT raise KeyboardInterrupt even in a process that started with SIGINT ignored.

    A job that a non-interactive shell starts in the background (`lra train ... &` in a script)
    ignores SIGINT, and Python then installs no SIGINT handler: Ctrl-C or `kill -INT` would not
    reach a training run, which Lightning otherwise shuts down gracefully, saving last.ckpt at the
    current step. (Machines with a time limit should rather set $LRA_STOP_AT: `lra.callbacks.StopAt`.)"""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    interruptible()
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
            PermissionError, KeyError) as err:
        # Bad input at the public boundary (paths included: --out naming a file where a folder goes,
        # a folder without write permission): one clear message, no traceback.
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"lra {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as err:
        # The file system refused (read-only, full, permission): the path and the cause, no traceback.
        where = f"{err.filename}: " if err.filename else ""
        print(f"lra {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C (or $LRA_STOP_AT) is not a crash: the runs it stopped have recorded themselves and
        # resume when the same command is run again. No traceback.
        print(f"\nlra {args.command}: interrupted; run the same command again to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
