"""One writer per workdir.

`bert-jax pretrain | finetune | distill` hold WORKDIR/LOCK_FILE while they run, so a second run on a
busy workdir stops (WorkdirBusyError, naming the other run's host and process) instead of
interleaving checkpoints or replacing results.

The lock is a small JSON file (host, pid, start time, command) created atomically with
create-exclusive, and its modification time is a heartbeat, renewed every
HEARTBEAT_SECONDS by a daemon thread. A lock is stale, and is taken over with a warning,
when its process is gone (same host) or its heartbeat is older than STALE_SECONDS (another
host, e.g. on a shared filesystem, where the pid cannot be checked).

Every file operation goes through `LockFiles` (create-exclusive, read with mtime, delete,
update mtime, and the workdir's directory, which a bucket does not need), the one place
to change for other storage.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time

from bert_jax.errors import WorkdirBusyError
from bert_jax.host import folders, outputs

log = logging.getLogger(__name__)

LOCK_FILE = "bert_jax.lock"
HEARTBEAT_SECONDS = 60.0
STALE_SECONDS = 600.0  # 10 missed heartbeats: that run's host stopped or lost the disk


class LockFiles:
    """The lock's file operations on a local or mounted filesystem."""

    @staticmethod
    def create_exclusive(path: str, text: str) -> bool:
        """Writes a new file `path`; False when it exists (atomic, also over NFS v3+)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return True

    @staticmethod
    def read(path: str) -> tuple[str, float] | None:
        """(text, modification time), or None when there is no file."""
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None

    @staticmethod
    def delete(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    @staticmethod
    def touch(path: str) -> None:
        os.utime(path)

    @staticmethod
    def make_directory(path: str) -> bool:
        """Creates directory `path` if needed; True when it did."""
        if os.path.isdir(path):
            return False
        os.makedirs(path, exist_ok=True)
        return True

    @staticmethod
    def remove_directory_if_empty(path: str) -> None:
        with contextlib.suppress(OSError):  # not empty: the run wrote its files
            os.rmdir(path)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def describe_owner(owner: dict) -> str:
    """'host H, pid P, bert-jax finetune started T': the run holding a lock, for messages."""
    return (f"host {owner.get('host', '?')}, pid {owner.get('pid', '?')}, "
            f"{owner.get('command', 'bert-jax')} started {owner.get('started', '?')}")


def live_owner(workdir: str) -> dict | None:
    """The run that holds `workdir`'s lock now ({"host", "pid", "command", "started"}), or None.

    No lock, or a stale one (see WorkdirLock._stale_reason)."""
    found = LockFiles.read(os.path.join(workdir, LOCK_FILE))
    if found is None:
        return None
    try:
        owner = json.loads(found[0])
    except ValueError:
        owner = {}  # being written just now, or damaged: its heartbeat decides
    owner = owner if isinstance(owner, dict) else {}
    probe = WorkdirLock(workdir, "")
    return owner if probe._stale_reason(owner, time.time() - found[1]) is None else None


class WorkdirLock:
    """The lock of one workdir; `acquire()` then `release()`, or use it as a context."""

    def __init__(self, workdir: str, command: str, files: type[LockFiles] = LockFiles,
                 kind: str | None = None):
        self.kind = kind  # recorded in the workdir once the lock is held (`folders`)
        self.workdir = os.path.abspath(workdir)
        self.path = os.path.join(self.workdir, LOCK_FILE)
        self.files = files
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
                      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self._text = json.dumps(self.owner)
        self._created_workdir = False
        self._marked = None  # the workdir's names before this run wrote the kind marker
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self) -> None:
        """Takes the lock (a stale one with a warning).

        Raises WorkdirBusyError when a live run holds it."""
        self._created_workdir = self.files.make_directory(self.workdir)
        for _ in range(3):  # a lock released or taken over between our calls: look again
            if self.files.create_exclusive(self.path, self._text):
                self._heartbeat = threading.Thread(target=self._beat, daemon=True,
                                                   name="workdir-lock-heartbeat")
                # it touches one file and holds no lock a forked child could need
                self._heartbeat.fork_safe = True
                self._heartbeat.start()
                if self.kind is not None:
                    self._marked = folders.mark(self.workdir, self.kind,
                                                     self.owner["command"])
                return
            found = self.files.read(self.path)
            if found is None:
                continue
            text, mtime = found
            try:
                owner = json.loads(text)
            except ValueError:
                owner = {}  # being written just now, or damaged
            stale = self._stale_reason(owner, time.time() - mtime)
            if stale is None:
                self._remove_created_workdir()
                raise WorkdirBusyError(
                    f"{self.workdir} is in use by another run ({describe_owner(owner)}); wait for "
                    f"it to finish or use another --workdir (if that run is gone, delete "
                    f"{self.path})")
            log.warning("taking over the lock of %s from a run that is gone (%s; %s)",
                        self.workdir, describe_owner(owner), stale)
            self.files.delete(self.path)
        self._remove_created_workdir()
        raise WorkdirBusyError(f"could not take the lock {self.path}: other runs keep taking it")

    def _stale_reason(self, owner: dict, age: float) -> str | None:
        """Why a lock found on the workdir no longer holds it, or None when it does."""
        if owner.get("host") == self.owner["host"] and isinstance(owner.get("pid"), int):
            if not _process_alive(owner["pid"]):
                return "its process no longer exists"
            return None
        if age > STALE_SECONDS:
            return f"no heartbeat for {age / 60:.0f} minutes"
        return None

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):  # a full disk still allows utime; else retry
                self.files.touch(self.path)

    def release(self) -> None:
        """Removes the lock if it is still this run's.

        It also removes the workdir if acquire made it and nothing else was written there."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            found = self.files.read(self.path)
            if found is not None and found[0] == self._text:
                folders.unmark_if_idle(self.workdir, self._marked, LOCK_FILE)
                self.files.delete(self.path)
        self._remove_created_workdir()

    def _remove_created_workdir(self) -> None:
        if self._created_workdir:
            self.files.remove_directory_if_empty(self.workdir)

    def __enter__(self) -> "WorkdirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def hold(workdir: str, command: str, primary: bool = True, *, kind: str | None = None,
         inputs: dict[str, str] | None = None):
    """The context that holds `workdir`'s lock for a run.

    `primary`: the process that writes; the others share its lock. With `kind`
    (a `folders` job kind) it first refuses a workdir of another kind or one of `inputs`
    ({flag: path}), and records `kind` once the lock is held. Paths with a scheme (gs://) are not
    locked yet."""
    if kind is not None:
        outputs.check_workdir(workdir, kind, inputs)
    if not primary or "://" in workdir:
        return contextlib.nullcontext()
    return WorkdirLock(workdir, command, kind=kind)
