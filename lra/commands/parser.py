"""The argument parser of `lra` and of each of its commands.

- Option names match exactly: no abbreviations (`--seed` is not taken for `--seeds`).
- An unknown option is an error of the command that got it: that command's usage, the closest
  option names ("did you mean --preset?"), exit status 2. A mistyped command or choice gets the
  closest valid one in its message too, a comma-separated list the space-separated form.
- A renamed option (`Parser.rename`) is accepted under its old name, hidden from the help, with one
  warning line naming the current one.

Light by design: `lra --help` builds every command's parser, so nothing here (or in what the
commands' `add_parser` functions import) may import torch, Triton, Lightning, pandas or matplotlib.
"""
from __future__ import annotations

import argparse
import difflib
import sys

from lra.seq_len import parse_seq_len


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with exact option names, did-you-mean errors and renamed options.

    Sub-command parsers made by `add_subparsers().add_parser` are of this class too. Its
    `parse_known_args` returns no unknown arguments: it reports them as an error."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.renamed: dict[str, str] = {}

    def rename(self, old: str, new: str) -> None:
        """Accept the option string `old` as `new` (an option of this parser), with a warning."""
        if new not in self._option_string_actions:
            raise ValueError(f"{self.prog}: cannot rename {old} to {new}: no option {new}")
        self.renamed[old] = new

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        namespace, extras = super().parse_known_args(self._current_names(args), namespace)
        if extras:
            self.error(self._unrecognized(extras))
        return namespace, extras

    def _current_names(self, args: list[str]) -> list[str]:
        """`args` with renamed options under their current names (one warning each)."""
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                return out + args[i:]
            name, eq, value = arg.partition("=")
            new = self.renamed.get(name)
            if new is not None:
                print(f"{self.prog}: warning: {name} is deprecated; use {new}", file=sys.stderr)
                arg = new + eq + value
            out.append(arg)
        return out

    def visible_options(self) -> list[str]:
        """The option strings the help shows (renamed and suppressed ones excluded)."""
        return [s for s, action in self._option_string_actions.items() if action.help is not argparse.SUPPRESS]

    def _unrecognized(self, extras: list[str]) -> str:
        words = []
        for arg in extras:
            if arg.startswith("-") and not _is_number(arg):
                close = difflib.get_close_matches(arg.partition("=")[0], self.visible_options(), n=1)
                if close:
                    arg += f" (did you mean {close[0]}?)"
            words.append(arg)
        return "unrecognized arguments: " + " ".join(words)

    def _get_value(self, action, arg_string):
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as err:
            raise _with_hint(action, arg_string, err) from None

    def _check_value(self, action, value):
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            raise _with_hint(action, value, err) from None


def _with_hint(action: argparse.Action, value, err: argparse.ArgumentError) -> argparse.ArgumentError:
    """`err` with what the user probably meant: a space-separated list for a comma-separated one, or
    the closest choice."""
    text = str(value)
    if action.nargs in ("+", "*") and "," in text:
        items = " ".join(item for item in text.split(",") if item)
        return argparse.ArgumentError(action, f"{err.message}; a list is space-separated: {items}")
    close = difflib.get_close_matches(text, [str(c) for c in action.choices or ()], n=1)
    if close:
        return argparse.ArgumentError(action, f"{err.message}; did you mean {close[0]!r}?")
    return err


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def seq_len(text: str) -> int:
    """argparse type of every --seq-len / --seq-lens value: a number of tokens (4096) or of 1K (4K)."""
    try:
        return parse_seq_len(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
