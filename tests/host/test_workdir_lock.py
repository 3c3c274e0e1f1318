"""One writer per workdir (`bert_jax.host.workdir_lock`): a live run's lock stops a second
run with its host and pid; a lock whose process is gone, or whose heartbeat stopped on
another host, is taken over with a warning; releasing leaves nothing behind."""

import json
import os
import subprocess
import sys
import time

import pytest

from bert_jax.errors import WorkdirBusyError
from bert_jax.host import workdir_lock
from bert_jax.host.workdir_lock import LOCK_FILE, WorkdirLock


def write_lock(workdir, **owner):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, LOCK_FILE)
    with open(path, "w") as f:
        json.dump({"command": "bert-jax pretrain", "started": "2026-01-01T00:00:00Z", **owner}, f)
    return path


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_run_holds_the_lock_and_leaves_nothing(tmp_path):
    workdir = str(tmp_path / "new")
    with WorkdirLock(workdir, "bert-jax pretrain") as lock:
        owner = json.load(open(os.path.join(workdir, LOCK_FILE)))
        assert owner == lock.owner and owner["pid"] == os.getpid()
        with pytest.raises(WorkdirBusyError, match=f"in use by another run \\(host "
                                                   f"{owner['host']}, pid {os.getpid()}, "):
            WorkdirLock(workdir, "bert-jax finetune").acquire()
        assert os.path.exists(os.path.join(workdir, LOCK_FILE))  # the loser took nothing
    assert not os.path.exists(workdir)  # made for the lock and left empty: removed


def test_a_lock_of_a_gone_process_is_taken_over_with_a_warning(tmp_path, caplog):
    workdir = str(tmp_path / "w")
    write_lock(workdir, host=WorkdirLock(workdir, "x").owner["host"], pid=dead_pid())
    with WorkdirLock(workdir, "bert-jax pretrain"):
        assert json.load(open(os.path.join(workdir, LOCK_FILE)))["pid"] == os.getpid()
    assert "its process no longer exists" in caplog.text
    assert os.listdir(workdir) == []  # the workdir existed: kept


def test_another_hosts_lock_counts_until_its_heartbeat_is_too_old(tmp_path, caplog):
    workdir = str(tmp_path / "w")
    path = write_lock(workdir, host="other-host", pid=1)
    with pytest.raises(WorkdirBusyError, match="host other-host, pid 1, bert-jax pretrain"):
        WorkdirLock(workdir, "bert-jax pretrain").acquire()
    old = time.time() - workdir_lock.STALE_SECONDS - 60
    os.utime(path, (old, old))
    with WorkdirLock(workdir, "bert-jax pretrain"):
        pass
    assert "no heartbeat for 11 minutes" in caplog.text


def test_the_heartbeat_renews_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_SECONDS", 0.05)
    workdir = str(tmp_path / "w")
    with WorkdirLock(workdir, "bert-jax pretrain"):
        path = os.path.join(workdir, LOCK_FILE)
        old = time.time() - 1000
        os.utime(path, (old, old))
        deadline = time.time() + 10
        while os.path.getmtime(path) < time.time() - 100 and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.getmtime(path) > time.time() - 100


def test_a_released_lock_that_another_run_took_over_is_left_to_it(tmp_path):
    workdir = str(tmp_path / "w")
    lock = WorkdirLock(workdir, "bert-jax pretrain")
    lock.acquire()
    path = write_lock(workdir, host="other-host", pid=1)  # taken over meanwhile
    lock.release()
    assert json.load(open(path))["host"] == "other-host"
