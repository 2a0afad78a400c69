"""The `lra` command: one sub-command per module in `lra/commands/`.

Each command module exposes `add_parser(subparsers)` (registers its arguments and sets
`func=run`) and `run(args) -> int`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Order is the order `lra --help` lists them in.
COMMANDS = ("info", "data", "train", "sweep", "bench", "table", "plot", "transfer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lra",
        description="Long Range Arena harness: exact (Flash) vs approximate attention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"lra.commands.{name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, KeyError) as err:
        # Bad input at the public boundary: one clear message, no traceback.
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"lra {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
