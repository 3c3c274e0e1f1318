"""The one exception family for bad input, and the rule that sorts every failure.

`bert-jax` prints a `UserError` as one line, `bert-jax COMMAND: error: MESSAGE`, and
exits with code 2; so too the OSErrors a user causes and fixes (`is_users_os_error`:
a missing file, a file where a folder belongs or the reverse, no permission, a full
disk), whose messages name the path, and a host that cannot be reached
(`is_unreachable`). A library's exception that means bad input (a file that is not
JSON, bytes that are not UTF-8, a checkpoint it cannot read, an unknown name) is converted
into a UserError where it enters our code, naming the file or flag.
Any other exception is a bug, a ValueError or KeyError too: one line saying so and
naming the file that holds its traceback, exit code 1.
"""

from __future__ import annotations

import errno
import socket


class UserError(ValueError):
    """Input the user can fix: a config value, a file, a checkpoint that does not fit.

    The message names the key, or the file and line."""


# The errnos of the OSErrors a user causes and fixes: a missing file, a file where a
# folder belongs or the reverse, an output that exists, no permission, a full disk or
# quota, a read-only mount.
_USERS_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST,
                           errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT,
                           errno.EROFS})


def is_users_os_error(error: BaseException) -> bool:
    """Whether `error` is an OSError of the user's making.

    That is one of `_USERS_ERRNOS`, or one of their types raised with a message only, such as
    `FileNotFoundError("no config.json in DIR")`."""
    return isinstance(error, (FileNotFoundError, NotADirectoryError, IsADirectoryError,
                              FileExistsError, PermissionError)) or \
        isinstance(error, OSError) and error.errno in _USERS_ERRNOS


def is_users_error(error: BaseException) -> bool:
    """Whether `error` is the user's to fix (exit code 2).

    A UserError or `is_users_os_error`."""
    return isinstance(error, UserError) or is_users_os_error(error)


def is_unreachable(error: BaseException) -> bool:
    """Whether `error` says a host could not be reached (the user's to fix, exit 2).

    No network, a name that does not resolve, a refused connection or a timeout; a bucket's
    client, gcsfs, raises aiohttp's. Not a bug, and nothing to fix in the input."""
    client = isinstance(error, OSError) and type(error).__module__.split(".")[0] == "aiohttp"
    return client or isinstance(error, (ConnectionError, TimeoutError, socket.gaierror))


def check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    """`value` must be an int > 0 (>= 0 with allow_zero); `name` is the key or flag."""
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{name} must be an integer >= {low}, got {value!r}")


def check_learning_rate(value, allow_zero: bool | None = None, zero_hint: str = "") -> None:
    """A learning rate must be a number > 0.

    A negative one climbs the loss, zero trains nothing: allowed only where the config has the
    explicit `allow_zero_learning_rate` (`allow_zero`: its value; None where the config has no such
    key, and `zero_hint` says what to do instead)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and (value > 0 or allow_zero and value == 0):
        return
    why = ""
    if number and value < 0:
        why = " (a negative rate raises the loss)"
    elif number:
        why = (" (nothing would train; --config.allow_zero_learning_rate=True if that is the "
               "intent)" if allow_zero is not None else f" (nothing would train{zero_hint})")
    raise UserError(f"learning_rate must be a number > 0, got {value!r}{why}")


def check_divisible(name: str, value: int, multiple: int, why: str) -> None:
    if value % multiple:
        raise UserError(f"{name} {value} must be a multiple of {multiple} ({why})")


class CheckpointError(UserError):
    """No readable checkpoint, or one whose parameters do not match the model."""


class NonFiniteError(FloatingPointError):
    """A run whose loss or gradient stayed NaN/Inf (it diverged).

    `bert-jax` prints the message (the step, the values, what to change) as one line and exits with
    code 1."""


class Interrupted(Exception):
    """Ctrl-C stopped a run at a step boundary; the message says which checkpoint it saved.

    `bert-jax` prints it as one line and exits with code 130."""


class WorkdirBusyError(UserError):
    """Another run holds the workdir's lock (`bert_jax.host.workdir_lock`)."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is XLA's device out-of-memory error (RESOURCE_EXHAUSTED).

    Raised by a training step or by compiling one."""
    text = str(error)  # TensorStore says RESOURCE_EXHAUSTED for a full disk too
    return "RESOURCE_EXHAUSTED" in text and "os_error_code" not in text \
        and "No space left" not in text


def memory_levers(grad_accum_steps: int = 1) -> str:
    """What lowers a training step's device memory, most harmless first.

    For pretraining and fine-tuning alike, and `bert-jax compile`'s plan: the run's own
    `grad_accum_steps` makes the suggested value concrete."""
    return (f"raise --config.grad_accum_steps (e.g. to {2 * grad_accum_steps}: the same "
            "batch in sequential micro-batches), --config.remat_policy=full (recompute "
            "activations), --config.compute_dtype=bfloat16, shard parameters and optimizer "
            "state with --config.mesh_shape.fsdp=-1 --config.mesh_shape.data=1, or a smaller "
            "--config.global_batch_size")


def out_of_memory(*, batch_size: int, seq_length: int, grad_accum_steps: int = 1) -> UserError:
    """One line for a step that did not fit in device memory.

    The batch and sequence length it tried, `memory_levers` and the README's section for more."""
    return UserError(f"out of device memory (RESOURCE_EXHAUSTED) at global_batch_size "
                     f"{batch_size}, max_seq_length {seq_length}: "
                     f"{memory_levers(grad_accum_steps)} (README.md, Troubleshooting: Out "
                     "of memory)")


def check_ids(name: str, ids, size: int, source: str, table: str = "vocab_size") -> None:
    """The ids in host array `ids` must index a table of `size` rows (`table` of `source`).

    An id outside it would read no embedding and give NaN instead of an error. Give host
    data (numpy, lists): checking a device array would wait for it."""
    import numpy as np

    ids = np.asarray(ids)
    if ids.size == 0:
        return
    if not np.issubdtype(ids.dtype, np.integer):
        raise UserError(f"{name} must hold integer ids, got {ids.dtype}")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= size:
        raise UserError(f"{name} holds id {low if low < 0 else high} but {source} has "
                        f"{table}={size}: ids outside 0..{size - 1} would read no embedding")
