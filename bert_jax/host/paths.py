"""Run paths.

Every file bert_jax reads or writes for a run goes through this module, so a path may be local or a
URL of any scheme etils.epath knows (`gs://bucket/run`, s3://, ...).

Local paths behave exactly as with `os`, `glob` and `open`. Remote paths use
`etils.epath`, the layer Orbax saves checkpoints with, over fsspec (gcsfs for gs://):
never over TensorFlow's GCS client, which cannot be pointed at an emulator.

`STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` (the Google client libraries' convention)
points all of bert_jax at a GCS emulator such as fake-gcs-server, without credentials:
importing this module sets what each layer needs from it (tensorstore's URL and test
token for Orbax's arrays, gcsfs's anonymous access).

Object stores have no rename and no append: `move` copies then deletes, and `Appender`
rewrites the whole object at each flush (logs stay small).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import glob as _glob
import io
import os
import posixpath
import re
import shutil
import stat
import sys
import time
import uuid
from typing import IO

from etils import epath

from bert_jax.errors import UserError

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def configure_storage() -> None:
    """Points every storage layer at $STORAGE_EMULATOR_HOST when set.

    It also makes epath use fsspec for gs:// even where TensorFlow is installed. Runs at import
    (before the layers read their settings); call again after changing the variable in-process."""
    os.environ["EPATH_USE_TF"] = "false"  # epath caches this on its first remote path
    emulator = os.environ.get(EMULATOR_ENV, "")
    if not emulator or emulator == "default":
        return
    url = emulator if "://" in emulator else f"http://{emulator}"
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = url
    os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    # gcsfs asks a gRPC control API about each bucket's layout; an emulator has none
    # (each ask waits 60 s). Read when gcsfs is imported.
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    import fsspec
    fsspec.config.conf.setdefault("gcs", {})["token"] = "anon"


configure_storage()


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (gs://...) rather than a local path."""
    return "://" in os.fspath(path) and not os.fspath(path).startswith("file://")


def _module(path: str):
    return posixpath if is_remote(path) else os.path


def join(path: str | os.PathLike, *parts: str) -> str:
    path = os.fspath(path)
    return _module(path).join(path, *parts)


def abspath(path: str | os.PathLike) -> str:
    """Local paths made absolute; URLs as given (without a trailing slash)."""
    path = os.fspath(path)
    return path.rstrip("/") if is_remote(path) else os.path.abspath(path)


def basename(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    return _module(path).basename(path.rstrip("/") if is_remote(path) else path)


def dirname(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    return _module(path).dirname(path.rstrip("/") if is_remote(path) else path)


def _epath(path: str | os.PathLike) -> epath.Path:
    return epath.Path(os.fspath(path))


def exists(path: str | os.PathLike) -> bool:
    return _epath(path).exists() if is_remote(path) else os.path.exists(path)


def isdir(path: str | os.PathLike) -> bool:
    """For a URL: whether any object lies under it (object stores have no directories)."""
    return _epath(path).is_dir() if is_remote(path) else os.path.isdir(path)


def isfile(path: str | os.PathLike) -> bool:
    return _epath(path).is_file() if is_remote(path) else os.path.isfile(path)


def listdir(path: str | os.PathLike) -> list[str]:
    """The names in a directory, sorted."""
    if is_remote(path):
        return sorted(p.name for p in _epath(path).iterdir())
    return sorted(os.listdir(path))


def makedirs(path: str | os.PathLike) -> None:
    """Creates the directory and its parents.

    A no-op for URLs, whose directories appear with their first object."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def glob(pattern: str) -> list[str]:
    """The sorted paths matching `pattern` (wildcards in any component)."""
    if not is_remote(pattern):
        return sorted(_glob.glob(pattern))
    scheme, rest = pattern.split("://", 1)
    parts = rest.split("/")
    fixed = next((i for i, p in enumerate(parts) if any(c in p for c in "*?[")), len(parts))
    if fixed == len(parts):
        return [pattern] if exists(pattern) else []
    base = f"{scheme}://" + "/".join(parts[:fixed])
    return sorted(os.fspath(p) for p in _epath(base).glob("/".join(parts[fixed:])))


def free_space(path: str | os.PathLike) -> int | None:
    """Free bytes on the filesystem holding `path`.

    None for URLs (a bucket has no such limit) or when it cannot be read."""
    if is_remote(path):
        return None
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def getsize(path: str | os.PathLike) -> int:
    return _epath(path).stat().length if is_remote(path) else os.path.getsize(path)


def mtime_ns(path: str | os.PathLike) -> int:
    """The modification time in nanoseconds (seconds precision for URLs)."""
    if is_remote(path):
        return int(_epath(path).stat().mtime) * 1_000_000_000
    return os.stat(path).st_mtime_ns


def open(path: str | os.PathLike, mode: str = "r", encoding: str | None = None) -> IO:  # noqa: A001
    """A file object.

    The builtin `open` for local paths; for URLs a streamed read, or a write that appears as one
    object on close. Modes r, w, rb, wb (no append: `Appender`)."""
    if not is_remote(path):
        return builtins.open(path, mode, encoding=encoding)
    if "a" in mode or "+" in mode:
        raise ValueError(f"mode {mode!r} is not supported for {path} (objects cannot be appended)")
    if "b" in mode:
        return _epath(path).open(mode)
    return _epath(path).open(mode, encoding=encoding or "utf-8")


def read_slices(path: str | os.PathLike, starts: list[int], sizes: list[int]) -> list[bytes]:
    """`sizes[i]` bytes of a file from byte `starts[i]`, for each i (fewer at its end).

    For a URL, one ranged request per slice, all in flight at once (fsspec's `cat_ranges`), without
    the read-ahead of a streamed file (which would fetch megabytes for each record of a shuffled
    read)."""
    if not is_remote(path):
        with builtins.open(path, "rb") as f:  # a file object per call: threads may read at once
            slices = []
            for start, size in zip(starts, sizes):
                f.seek(start)
                slices.append(f.read(size))
            return slices
    import fsspec
    filesystem, _ = fsspec.core.url_to_fs(str(path))
    return filesystem.cat_ranges([str(path)] * len(starts), starts,
                                 [start + size for start, size in zip(starts, sizes)],
                                 on_error="raise")


STDOUT = "-"  # the output path that means standard output


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "w"):
    """Yields a file whose content replaces `path` whole when the block succeeds.

    It is written beside it, then renamed; for a URL kept in memory, then written as one object: a
    remote file object would upload a partial content when an error closes it. A symlink's target
    is replaced so (the link stays), a dangling one's target created. What is not a regular file
    (a device, a FIFO, /dev/stdout: `write_target`) is opened and written through in place, never
    replaced or removed; `STDOUT` ("-") is standard output. A symlink loop, or a failed write
    through, raises UserError naming `path`."""
    path = os.fspath(path)
    if path == STDOUT:
        stream = sys.stdout.buffer if "b" in mode else sys.stdout
        yield stream
        stream.flush()
        return
    if is_remote(path):
        buffer = io.BytesIO() if "b" in mode else io.StringIO()
        yield buffer
        with open(path, mode) as f:
            f.write(buffer.getvalue())
        return
    target, through = write_target(path)
    if through:
        with _writing_through(target, mode) as f:
            yield f
        return
    tmp = temporary_sibling(target)
    shown = target if os.path.islink(path) else path
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
        os.replace(tmp, target)
    except OSError as e:
        renamed = in_user_terms(e, tmp, shown)
        if renamed is e:
            raise
        raise renamed from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# The links to an open file descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N): written
# through that descriptor, whatever it leads to (a pipe, a terminal, or the file a shell
# redirected to, which `>>` must not see truncated and later lines must not overwrite).
_DESCRIPTOR_LINK = re.compile(
    r"/dev/(?P<std>stdout|stderr)|/dev/fd/(?P<fd>\d+)|/proc/(?P<pid>self|thread-self|\d+)/fd/(?P<n>\d+)")
_MAX_SYMLINKS = 40  # as Linux's


def write_target(path: str | os.PathLike) -> tuple[str, bool]:
    """(where a write of the local `path` lands, whether it is written through in place).

    (the resolved path, False) for a regular file, a new one, or a symlink to either (its target,
    dangling or not): `replacing` replaces it atomically. (`path`, True) for an existing file that
    is not a regular file (a character or block device, a FIFO), (the link, True) for a link to an
    open file descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N): written through. A symlink
    loop raises UserError naming `path`."""
    path = os.fspath(path)
    hop = _beside(os.getcwd(), path)
    for _ in range(_MAX_SYMLINKS):
        if _DESCRIPTOR_LINK.fullmatch(hop):
            return hop, True
        if not os.path.islink(hop):
            break
        hop = _beside(os.path.dirname(hop), os.readlink(hop))
    else:
        raise symlink_loop(path)
    try:
        mode = os.stat(hop).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:  # in a folder on the way
            raise symlink_loop(path) from None
        return hop, False  # new, or beneath a missing folder: the write says which
    through = not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
    return (path, True) if through else (hop, False)


def is_standard_output(path: str | os.PathLike) -> bool:
    """Whether a write of `path` goes to this process's standard output.

    "-", or a path written through (`write_target`) to the file, pipe or terminal that stdout is,
    such as /dev/stdout: a command's own report of it then belongs on stderr."""
    path = os.fspath(path)
    if path == STDOUT:
        return True
    if is_remote(path):
        return False
    try:
        target, through = write_target(path)
        if not through:
            return False
        mine, theirs = os.stat(target), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, UserError):  # no stdout descriptor (captured, closed)
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def _beside(folder: str, name: str) -> str:
    """`name` (absolute, or relative to `folder`) with the folders on its way resolved."""
    joined = os.path.join(folder, name)
    return os.path.join(os.path.realpath(os.path.dirname(joined)), os.path.basename(joined))


def symlink_loop(path: str, flag: str = "") -> UserError:
    """The UserError for a `path` (given as `flag`'s value) that is or passes a symlink loop."""
    named = f"{flag} {path}" if flag else path
    return UserError(f"{named} is a symlink loop (its links lead back to themselves, never to a "
                     "file or folder); choose another path")


@contextlib.contextmanager
def _writing_through(path: str, mode: str):
    """Yields `path` opened in place: a device, a FIFO, or a descriptor's link (its descriptor).

    An error opening or writing it becomes a UserError naming `path`; a reader that left (a
    closed pipe) stays a BrokenPipeError, which commands end on silently."""
    try:
        f = _open_through(path, mode)
    except OSError as e:
        raise UserError(f"cannot open {path} for writing ({e.strerror or e}); choose another "
                        "path") from e
    try:
        with f:
            yield f
    except BrokenPipeError:
        raise
    except OSError as e:
        if e.filename is not None:  # not the write's: it names its own file
            raise
        raise UserError(f"could not write {path} ({e.strerror or e}); choose another path") \
            from e


def _open_through(path: str, mode: str) -> IO:
    """`path` opened for writing without truncating, or a copy of the descriptor it links to.

    A descriptor of this process is written after what sys.stdout and sys.stderr hold (flushed
    first)."""
    encoding = None if "b" in mode else "utf-8"
    link = _DESCRIPTOR_LINK.fullmatch(path)
    if link and link["pid"] in ("self", "thread-self", str(os.getpid())):
        descriptor = int(link["n"])
    elif link and not link["pid"]:
        descriptor = int(link["fd"]) if link["fd"] else 1 if link["std"] == "stdout" else 2
    else:  # append: a device or FIFO has no content to keep, a shell's `>>` file has
        return builtins.open(path, mode.replace("w", "a"), encoding=encoding)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return os.fdopen(os.dup(descriptor), mode, encoding=encoding)


def read_text(path: str | os.PathLike) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `path` whole or not at all (`replacing`): a killed run leaves no half file.

    A device, a FIFO or /dev/stdout is written through instead, a symlink's target replaced."""
    with replacing(path) as f:
        f.write(text)


def read_bytes(path: str | os.PathLike) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def remove(path: str | os.PathLike) -> None:
    if is_remote(path):
        _epath(path).unlink()
    else:
        os.remove(path)


def rmtree(path: str | os.PathLike, missing_ok: bool = False) -> None:
    if missing_ok and not exists(path):
        return
    if is_remote(path):
        _epath(path).rmtree()
    else:
        shutil.rmtree(path)


def move(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Renames `src` (a file or directory) to `dst`, which must not exist.

    Atomic on a local filesystem; on an object store a copy of every object, then their removal."""
    if not is_remote(src):
        os.replace(src, dst)
    elif isdir(src):
        scheme, base = os.fspath(src).rstrip("/").split("://", 1)
        for root, _, files in _epath(src).walk():
            root = os.fspath(root).split("://", 1)[-1]  # fsspec drops the scheme
            for name in files:
                _epath(f"{scheme}://{root}/{name}").copy(
                    _epath(join(dst, root[len(base):].lstrip("/"), name)))
        rmtree(src)
    else:
        _epath(src).rename(dst)


def upload_tree(local_dir: str, dst: str) -> None:
    """Copies the files under the local directory `local_dir` to `dst` (any path)."""
    for root, _, files in os.walk(local_dir):
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), local_dir)
            with builtins.open(os.path.join(root, name), "rb") as source, \
                    open(join(dst, *relative.split(os.sep)), "wb") as target:
                shutil.copyfileobj(source, target, 8 << 20)


def temporary_sibling(path: str | os.PathLike) -> str:
    """A new, unused path next to `path` (same filesystem or bucket), not created."""
    path = abspath(path)
    return join(dirname(path), f".tmp-{basename(path)}-{uuid.uuid4().hex[:12]}")


def owned_temporary_sibling(path: str | os.PathLike) -> str:
    """A `temporary_sibling` that names this process, its owner (`remove_abandoned_siblings`)."""
    return f"{temporary_sibling(path)}-{os.getpid()}"


def remove_abandoned_siblings(path: str | os.PathLike) -> None:
    """Removes the `owned_temporary_sibling`s of a local `path` whose owners have ended.

    What killed runs left; a sibling of a process still running is its own."""
    if is_remote(path):
        return
    folder, name = os.path.split(abspath(path))
    for left in _glob.glob(os.path.join(_glob.escape(folder), f".tmp-{_glob.escape(name)}-*-*")):
        owner = left.rsplit("-", 1)[1]
        if owner.isdigit() and not _running(int(owner)):
            shutil.rmtree(left, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def rmtree_after_writers(path: str | os.PathLike) -> None:
    """`rmtree(path, missing_ok=True)`, again while a writer still closing adds a file to it."""
    for attempt in range(5):
        try:
            return rmtree(path, missing_ok=True)
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or attempt == 4:
                raise
            time.sleep(0.2)


# Errors of a failed write that carry no file name (a full disk, a read-only mount).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def in_user_terms(error: OSError, tmp: str, path: str) -> OSError:
    """`error` naming `path` instead of `tmp`: the user never gave the temporary name.

    That is where it names `tmp`, its `temporary_sibling` (or a file under it), or where a write
    error names no file. The same type and errno; `error` itself when nothing needs renaming."""
    def rename(name):
        if isinstance(name, str) and (name == tmp or name.startswith(tmp + "/")):
            return path + name[len(tmp):]
        return name
    first, second = rename(error.filename), rename(error.filename2)
    if first is None and error.errno in _WRITE_ERRNOS:
        first = path
    if (first, second) == (error.filename, error.filename2):
        return error
    try:
        return type(error)(error.errno, error.strerror, first, None, second)
    except TypeError:  # a library's OSError subclass with another signature
        return OSError(error.errno, error.strerror, first, None, second)


class Appender:
    """An append-only log (text or, with binary=True, bytes).

    A local file opened for append; on an object store the content so far, rewritten whole at each
    `flush` (objects cannot be appended; a killed run keeps the last flushed version)."""

    def __init__(self, path: str | os.PathLike, *, binary: bool = False):
        self.path, self.binary = os.fspath(path), binary
        self._remote = is_remote(self.path)
        if self._remote:  # created at once, as a local file opened for append is
            self._dirty = not exists(self.path)
            self._content = ((b"" if binary else "") if self._dirty else
                             read_bytes(self.path) if binary else read_text(self.path))
            self.flush()
        else:
            self._file = (builtins.open(self.path, "ab") if binary
                          else builtins.open(self.path, "a", encoding="utf-8"))

    def write(self, data) -> None:
        if self._remote:
            self._content += data
            self._dirty = True
        else:
            self._file.write(data)

    def flush(self) -> None:
        if not self._remote:
            self._file.flush()
        elif self._dirty:
            with open(self.path, "wb" if self.binary else "w") as f:
                f.write(self._content)
            self._dirty = False

    def close(self) -> None:
        self.flush()
        if not self._remote:
            self._file.close()
