"""One flag style for every command.

`--max_seq_length`, with underscores, as google-research/bert, transformers' examples and absl write
flags.

`ArgumentParser` is argparse's, but also accepts each multi-word long option with
dashes (`--max-seq-length`), which `--help` does not show, and options renamed since
(`deprecated={"--init": "--init_from"}`), which print one warning line. Every
`bert-jax` command builds its parser with it; a boolean key is `--key` / `--no_key`
(`BooleanOptionalAction`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping, Sequence


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser that takes `--a-b` for `--a_b`, and `deprecated` old option names.

    `deprecated`: old -> new, each with one warning line on stderr when used."""

    def __init__(self, *args, deprecated: Mapping[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.deprecated = dict(deprecated or {})

    def parse_known_args(self, args: Sequence[str] | None = None, namespace=None):
        """argparse's, after spelling each option of `args` as it was registered."""
        args = list(sys.argv[1:] if args is None else args)
        known = {s for action in self._actions for s in action.option_strings}
        renamed, warned = [], set()
        for i, arg in enumerate(args):
            if arg == "--":  # what follows is positional
                renamed.extend(args[i:])
                break
            name, eq, value = arg.partition("=")
            old = next((n for n in (name, underscored(name)) if n in self.deprecated), None)
            new = underscored(self.deprecated.get(old, name)) if name.startswith("--") else name
            if name in known or new not in known:
                renamed.append(arg)
                continue
            if old and old not in warned:
                warned.add(old)
                print(f"{self.prog}: warning: {name} is deprecated, use {new}", file=sys.stderr)
            renamed.append(new + eq + value)
        return super().parse_known_args(renamed, namespace)


class BooleanOptionalAction(argparse.BooleanOptionalAction):
    """argparse's `--x` / `--no-x` pair in this module's spelling.

    `--x` / `--no_x` (the dashed form is accepted as every option's is)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.option_strings = [underscored(s) for s in self.option_strings]
        self.negatives = {underscored("--no-" + s[2:]) for s in option_strings
                          if s.startswith("--")}

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negatives)


def underscored(option: str) -> str:
    """`--max-seq-length` -> `--max_seq_length` (the leading dashes kept)."""
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option
