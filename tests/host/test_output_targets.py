"""Outputs that are not plain files (issue 66): a FIFO, a device, /dev/stdout and "-" are
written through in place, never replaced; a symlink's target is replaced and the link
stays; a symlink loop is refused in our words. `paths.replacing` directly, the output
checks, then `predict`, `evaluate` and `embed` end to end."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import threading

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax.host import folders, outputs, paths

from helpers import REPO

RELEASE = os.path.join(REPO, "tests", "fixtures", "release_0.2.0")


class FifoReader:
    """A FIFO at `path` and a thread reading it whole (`text()` once the writer closed it)."""

    def __init__(self, path):
        self.path = str(path)
        os.mkfifo(self.path)
        self.data = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.path, "rb") as f:
            self.data.append(f.read())

    def content(self) -> bytes:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the FIFO's reader is still waiting"
        return self.data[0]


def hidden(folder) -> list[str]:
    """The temporary files (`.tmp-*`) left in `folder`."""
    return [name for name in os.listdir(folder) if name.startswith(".tmp-")]


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    """Cases: text and binary writes into a FIFO whose reader waits; no temporary file."""
    for mode, data in (("w", "one\ntwo\n"), ("wb", b"\x93NUMPY")):
        fifo = tmp_path / f"fifo{mode}"
        reader = FifoReader(fifo)
        with paths.replacing(str(fifo), mode) as f:
            f.write(data)
        assert reader.content() == (data if mode == "wb" else data.encode())
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert hidden(tmp_path) == []


def test_a_symlink_keeps_being_a_link_and_its_target_is_replaced(tmp_path):
    """Cases: a relative link to a file in another folder, a chain of two links, a dangling
    link (its target created), an error inside the block (target and link as they were)."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(os.path.join("real", "out.jsonl"))
    chain = tmp_path / "chain.jsonl"
    chain.symlink_to(link)
    paths.write_text(str(link), "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    paths.write_text(str(chain), "newer\n")
    assert chain.is_symlink() and link.is_symlink() and target.read_text() == "newer\n"
    with pytest.raises(ZeroDivisionError):
        with paths.replacing(str(link)) as f:
            f.write("half")
            1 / 0
    assert link.is_symlink() and target.read_text() == "newer\n"
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "real" / "new.jsonl")
    paths.write_text(str(dangling), "made\n")
    assert dangling.is_symlink() and (tmp_path / "real" / "new.jsonl").read_text() == "made\n"
    assert hidden(tmp_path) == [] and hidden(tmp_path / "real") == []


def test_a_symlink_loop_is_refused_in_one_line_naming_flag_and_path(tmp_path, monkeypatch):
    """Cases: `ln -s loop loop` written (write_text, replacing), checked as a file output, a
    folder output and a workdir; a path beneath a loop (`loop/x`); two links to each other."""
    monkeypatch.chdir(tmp_path)
    os.symlink("loop", "loop")
    os.symlink("b", "a")
    os.symlink("a", "b")
    for path in ("loop", "loop/x", "a"):
        with pytest.raises(UserError, match=rf"^{path} is a symlink loop .*; choose another path$"):
            paths.write_text(path, "x")
        with pytest.raises(UserError, match=rf"^--output {path} is a symlink loop"):
            outputs.check_file("--output", path, {})
    with pytest.raises(UserError, match=r"^--output loop is a symlink loop"):
        outputs.check_folder("--output", "loop", {}, None)
    with pytest.raises(UserError, match=r"^--workdir loop is a symlink loop .*choose another"):
        outputs.check_workdir("loop", folders.FINETUNING)
    assert os.readlink("loop") == "loop" and sorted(os.listdir()) == ["a", "b", "loop"]


def test_dev_null_stays_a_device_and_dev_full_fails_naming_it():
    """Cases: /dev/null written (text and binary) stays a character device; /dev/full's
    ENOSPC is one UserError naming it, and it stays a device too."""
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    paths.write_text("/dev/null", "gone\n")
    with paths.replacing("/dev/null", "wb") as f:
        np.save(f, np.zeros(3))
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(UserError, match=r"^could not write /dev/full \(No space left on device"):
        paths.write_text("/dev/full", "x" * 100)
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)
    outputs.check_file("--output", "/dev/null", {})  # written through: only writability counts


def test_dev_stdout_is_written_through_its_descriptor(capfd):
    """Cases: /dev/stdout written (the descriptor written through, the link kept) after a
    print still buffered in sys.stdout (which comes first)."""
    link = os.readlink("/dev/stdout")
    print("printed first", end="\n", flush=False)
    paths.write_text("/dev/stdout", "through the descriptor\n")
    assert capfd.readouterr().out == "printed first\nthrough the descriptor\n"
    assert os.readlink("/dev/stdout") == link
    outputs.check_file("--output", "/dev/stdout", {})


def test_dash_is_standard_output(capsysbinary):
    """Cases: "-" in text and binary mode; it counts as standard output, a plain path does
    not; the output check passes it."""
    assert paths.is_standard_output("-") and not paths.is_standard_output("out.jsonl")
    paths.write_text("-", "dash\n")
    with paths.replacing("-", "wb") as f:
        np.save(f, np.arange(3))
    out = capsysbinary.readouterr().out
    assert out.startswith(b"dash\n")
    np.testing.assert_array_equal(np.load(io.BytesIO(out[len(b"dash\n"):])), np.arange(3))
    outputs.check_file("--output", "-", {})


def test_output_checks_judge_a_symlink_by_its_target(tmp_path):
    """Cases: a link onto an input is refused; a dangling link whose target folder is
    missing is refused naming both; a FIFO and a link to a fresh file pass."""
    source = tmp_path / "input.txt"
    source.write_text("a line\n")
    (tmp_path / "onto_input.jsonl").symlink_to(source)
    with pytest.raises(UserError, match="is also --input"):
        outputs.check_file("--output", str(tmp_path / "onto_input.jsonl"), {"--input": str(source)})
    (tmp_path / "nowhere.jsonl").symlink_to(tmp_path / "missing" / "out.jsonl")
    with pytest.raises(UserError, match=r"is a symlink to .*missing/out.jsonl, whose folder does "
                                        "not exist"):
        outputs.check_file("--output", str(tmp_path / "nowhere.jsonl"), {})
    (tmp_path / "fresh.jsonl").symlink_to(tmp_path / "fresh_target.jsonl")
    outputs.check_file("--output", str(tmp_path / "fresh.jsonl"), {})
    os.mkfifo(tmp_path / "fifo")
    outputs.check_file("--output", str(tmp_path / "fifo"), {"--input": str(source)})


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A fine-tuned classifier (the model 0.2.0's fixture wrote, copied: nothing trains) and
    three texts: {"model": its folder, "texts": a text file, "labeled": its dev.tsv}."""
    root = tmp_path_factory.mktemp("output_targets")
    shutil.copytree(os.path.join(RELEASE, "finetune", "best"), root / "model")
    (root / "texts.txt").write_text("win a free prize now\nsee you at lunch\nok\n")
    return {"model": str(root / "model"), "texts": str(root / "texts.txt"),
            "labeled": os.path.join(RELEASE, "spam", "dev.tsv")}


def predict(finetuned, output):
    return cli.main(["predict", "--model", finetuned["model"], "--input", finetuned["texts"],
                     "--output", output])


def test_predict_writes_into_a_fifo_a_symlink_and_standard_output(finetuned, tmp_path, capsys):
    """Cases: predict --output FIFO (its reader gets the JSONL), --output a symlink (the
    target holds it, the link stays), --output - (stdout holds only the JSONL, the report
    goes to stderr)."""
    reader = FifoReader(tmp_path / "fifo")
    assert predict(finetuned, str(tmp_path / "fifo")) == 0
    lines = reader.content().decode().splitlines()
    assert len(lines) == 3 and all("label" in json.loads(line) for line in lines)
    assert "wrote 3 predictions to" in capsys.readouterr().err
    (tmp_path / "target.jsonl").write_text("old\n")
    (tmp_path / "link.jsonl").symlink_to("target.jsonl")
    assert predict(finetuned, str(tmp_path / "link.jsonl")) == 0
    assert (tmp_path / "link.jsonl").is_symlink()
    assert (tmp_path / "target.jsonl").read_text().splitlines() == lines
    capsys.readouterr()
    assert predict(finetuned, "-") == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == lines
    assert hidden(tmp_path) == [] and stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)


def test_predict_into_dev_full_and_a_loop_fail_in_one_line(finetuned, tmp_path, capsys):
    """Cases: predict --output /dev/full (exit 2, one line naming it, still a device),
    --output a symlink loop (refused before any work)."""
    os.symlink("loop", tmp_path / "loop")
    capsys.readouterr()
    assert predict(finetuned, str(tmp_path / "loop")) == 2
    assert capsys.readouterr().err == (
        f"bert-jax predict: error: --output {tmp_path}/loop is a symlink loop (its links lead "
        "back to themselves, never to a file or folder); choose another path\n")
    if os.path.exists("/dev/full"):
        assert predict(finetuned, "/dev/full") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "could not write /dev/full" in err, err
        assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_evaluate_to_standard_output_writes_no_file(finetuned, capsys):
    """Cases: evaluate --file --output - prints the metrics only (no evaluate_results.json
    in the model's folder)."""
    before = sorted(os.listdir(finetuned["model"]))
    assert cli.main(["evaluate", "--model", finetuned["model"], "--file", finetuned["labeled"],
                     "--output", "-"]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)["dev.tsv"]
    assert sorted(os.listdir(finetuned["model"])) == before


def test_embed_writes_npy_bytes_to_standard_output(finetuned, capsysbinary):
    """Cases: embed --output - (stdout holds only the .npy, the report on stderr naming
    standard output)."""
    assert cli.main(["embed", "--model", finetuned["model"], "--input", finetuned["texts"],
                     "--output", "-", "--max_seq_length", "16"]) == 0
    captured = capsysbinary.readouterr()
    vectors = np.load(io.BytesIO(captured.out))
    assert vectors.shape[0] == 3 and vectors.dtype == np.float32
    assert b"vectors to standard output" in captured.err
