"""The one exception family for bad input.

`bert-jax` prints a `UserError` (and the OSErrors and ValueErrors of bad files and
values) as one line, `bert-jax COMMAND: error: MESSAGE`, and exits with code 2;
any other exception is a bug: one line saying so and where its traceback went.
"""

from __future__ import annotations


class UserError(ValueError):
    """Input the user can fix: a config value, a file, a checkpoint that does not fit.
    The message names the key, or the file and line."""


def check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    """`value` must be an int > 0 (>= 0 with allow_zero); `name` is the key or flag."""
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{name} must be an integer >= {low}, got {value!r}")


def check_divisible(name: str, value: int, multiple: int, why: str) -> None:
    if value % multiple:
        raise UserError(f"{name} {value} must be a multiple of {multiple} ({why})")
