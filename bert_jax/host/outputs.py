"""One check of every command's output path before any work.

Nothing a command writes may replace what it reads, or another job's files.

Paths are compared after resolving symlinks and relative spellings (`a/../b`, `./b`);
URLs (gs://...) as written; `hf:` names never clash. A file output (predict's JSONL,
embed's .npy, evaluate's JSON) may not be an input, an existing folder, or an existing
file of a model directory, run folder or data folder (`folders`) other than one of
its own kind beside the run's files; a folder output (a tokenizer, a model, an export)
may not be, or hold, an input, and holds only its own kind of job (`check_kind`). Both
must be writable: `check_file` and `check_folder` say so at once, not after the work.
A training run's workdir (`check_workdir`) may not be one of its inputs. A symlink loop is
refused as any of them; a file output that is a symlink is judged by its target, and one
that is written through in place (a device, a FIFO, /dev/stdout, or "-" for standard output:
`paths.replacing`) need only be writable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from bert_jax.errors import UserError
from bert_jax.host import folders, paths

Inputs = Mapping[str, "str | Iterable[str] | None"]


def resolved(path: str) -> str:
    """`path` as one spelling: symlinks and relative parts resolved (URLs as written)."""
    return paths.abspath(path) if paths.is_remote(path) else os.path.realpath(path)


def _within(inner: str, outer: str) -> bool:
    """Whether resolved `inner` is `outer` or lies under it."""
    sep = "/" if paths.is_remote(outer) else os.sep
    return inner == outer or inner.startswith(outer.rstrip(sep) + sep)


def _each_input(inputs: Inputs):
    """(flag, path) for every local or remote path among `inputs` (hf: names skipped)."""
    for flag, value in inputs.items():
        for path in [value] if isinstance(value, str) else (value or ()):
            if isinstance(path, str) and path and not path.startswith("hf:"):
                yield flag, path


def refuse_inputs(flag: str, output: str, inputs: Inputs, *, folder: bool) -> None:
    """Raises UserError when `output` is one of `inputs` or holds one of them.

    `inputs`: {flag: path or paths}. Holding one counts for a `folder` output
    (replaced or filled whole)."""
    out = resolved(output)
    for input_flag, path in _each_input(inputs):
        source = resolved(path)
        if source == out:
            raise UserError(f"{flag} {output} is also {input_flag}: writing there would "
                            "replace what this command reads; choose another path")
        if folder and _within(source, out):
            raise UserError(f"{flag} {output} holds {input_flag} {path}: writing there "
                            "could replace what this command reads; choose another folder")


def artifact_around(path: str) -> tuple[str, str] | None:
    """(folder, kind) of the nearest folder at or above `path` holding a job's results or a model.

    The kind is `folders.kind_of`'s; None when there is none. For URLs only `path`'s own folder."""
    folder = resolved(path)
    while True:
        kind = folders.kind_of(folder)
        if kind is not None:
            return folder, kind
        parent = paths.dirname(folder)
        if paths.is_remote(folder) or parent == folder:
            return None
        folder = parent


def check_writable(flag: str, output: str, target: str | None = None) -> None:
    """Raises UserError when `output` cannot be created.

    Its nearest existing folder is not writable, or something on its way is a file. `target`: where
    the write lands when `output` is a symlink (`paths.write_target`), whose folder must exist.
    (URLs: not checked here.)"""
    if paths.is_remote(output):
        return
    folder = os.path.dirname(target or os.path.abspath(output))
    if target and not os.path.isdir(folder):
        raise UserError(f"{flag} {output} is a symlink to {target}, whose folder does not "
                        "exist; create it or choose another path")
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {output}: {folder} is a file, not a folder; choose "
                        "another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {output}: cannot write into {folder} (permission denied); "
                        "choose a writable path")


def check_file(flag: str, output: str, inputs: Inputs, *, suffixes: tuple[str, ...] = ()
               ) -> None:
    """Raises UserError, before any work, when the file `output` may not be written.

    It is an input, an existing folder, an existing file inside a model, run or data folder (except,
    directly in that folder, one ending in `suffixes`: what this command writes), a symlink loop,
    or not writable. A symlink is judged by its target (which is what is written); "-" (standard
    output) and a file written through in place (a device, a FIFO, /dev/stdout:
    `paths.write_target`) need only be writable."""
    if output == paths.STDOUT:
        return
    target, through = _write_target(flag, output)
    refuse_inputs(flag, output, inputs, folder=False)
    if through:
        if not os.access(target, os.W_OK):
            raise UserError(f"{flag} {output}: cannot write to it (permission denied); choose "
                            "a writable path")
        return
    if paths.isdir(target):
        raise UserError(f"{flag} {output} is a folder; name a file to write")
    if paths.exists(target):
        folder = paths.dirname(target)
        around = artifact_around(folder)
        own = paths.basename(target).endswith(suffixes) if suffixes else False
        if around and not (own and around[0] == resolved(folder) and not _named_file(target)):
            folder, kind = around
            raise UserError(f"{flag} {output} is a file of the {kind} folder {folder}; "
                            "writing there would replace it: choose another path")
    link = not paths.is_remote(output) and os.path.islink(output)
    check_writable(flag, output, target if link else None)


def _write_target(flag: str, output: str) -> tuple[str, bool]:
    """`paths.write_target` of `output` (a URL: itself), its symlink loop named as `flag`'s."""
    if paths.is_remote(output):
        return output, False
    try:
        return paths.write_target(output)
    except UserError:
        raise paths.symlink_loop(output, flag) from None


def refuse_symlink_loop(flag: str, path: str) -> None:
    """Raises UserError when the local `path` is or passes through a symlink loop."""
    if not paths.is_remote(path):
        _write_target(flag, path)


def _named_file(path: str) -> bool:
    """Whether `path` has a name that a job's folder uses for its own files."""
    return paths.basename(path) in folders.OWN_FILES


def check_folder(flag: str, output: str, inputs: Inputs, kind: str | None) -> None:
    """Raises UserError, before any work, when the folder `output` may not be written.

    It is or holds an input, holds another kind of job than `kind` (`check_kind`); with kind None
    (a tokenizer) when it is or lies inside any model, run or data folder; or when it is not
    writable."""
    refuse_symlink_loop(flag, output)
    refuse_inputs(flag, output, inputs, folder=True)
    if paths.isfile(output):
        raise UserError(f"{flag} {output} is a file; name a folder to write")
    if kind is None:
        around = artifact_around(output)
        if around:
            folder, found = around
            where = "is" if folder == resolved(output) else f"lies inside {folder}, which is"
            raise UserError(f"{flag} {output} {where} a {found} folder "
                            f"({folders.COMMANDS[found]}) whose files this would replace "
                            "or mix with; write into a folder of its own")
    else:
        folders.check_kind(output, kind)
    check_writable(flag, output)


class CheckedWorkdir(str):
    """A workdir that `check_workdir` let a job of `kind` write into.

    The check's result, which a command passes on to its job (`job_cli.run_job`), so that it is
    checked once."""

    def __new__(cls, workdir: str, kind: str):
        checked = super().__new__(cls, workdir)
        checked.kind = kind
        return checked


def check_workdir(workdir: str, kind: str, inputs: Inputs | None = None) -> CheckedWorkdir:
    """`workdir`, checked.

    Raises UserError when a job of `kind` (pretraining, fine-tuning, distillation) may not write
    into it: it is a symlink loop, one of the run's `inputs` (`--init_from`, `--teacher`), or holds
    another kind of job's results (`folders.check_kind`). A CheckedWorkdir of `kind`
    (checked where its command started) comes back as it is."""
    if isinstance(workdir, CheckedWorkdir) and workdir.kind == kind:
        return workdir
    refuse_symlink_loop("--workdir", workdir)
    refuse_inputs("the output folder", workdir, inputs or {}, folder=False)
    folders.check_kind(workdir, kind)
    return CheckedWorkdir(workdir, kind)
