"""`bert-jax COMMAND ...`: one entry point over the commands of `COMMANDS`.

Each is a function in its package's cli.py that parses its own flags; here is the one rule for what
a failure prints and its exit code (`main`, `report_failure`).

Commands are imported lazily so `bert-jax tokenize` does not pay for JAX.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
import threading
import traceback
from typing import Callable

from bert_jax import __version__
from bert_jax.errors import Interrupted, NonFiniteError, is_unreachable, is_users_error
from bert_jax.host import backend_env, compile_cache, library_log, stopping, tf_host

# Each command: the function that runs it on its flags ("module:function", imported when
# the command runs, so that `bert-jax tokenize` pays for no JAX) and its line of help.
# Parsing and exit codes live in each package's cli.py, over functions that parse nothing.
COMMANDS = {
    "train-tokenizer": ("bert_jax.data.cli:train_tokenizer_main",
                        "train a WordPiece or SentencePiece vocabulary"),
    "tokenize": ("bert_jax.tokenization.cli:tokenize_main",
                 "tokenize stdin, one line per input line"),
    "create-data": ("bert_jax.data.cli:create_data_main", "text files -> MLM/NSP TFRecords"),
    "pretrain": ("bert_jax.pretrain.cli:pretrain_main",
                 "pretrain BERT (MLM + NSP) over a device mesh"),
    "finetune": ("bert_jax.finetune.cli:finetune_main",
                 "fine-tune on GLUE, CSV/TSV/JSONL, CoNLL or SQuAD"),
    "distill": ("bert_jax.finetune.cli:distill_main",
                "distil a fine-tuned model into a smaller student"),
    "evaluate": ("bert_jax.finetune.cli:evaluate_main", "evaluate a fine-tuned workdir"),
    "predict": ("bert_jax.finetune.cli:predict_main", "predict with a fine-tuned workdir"),
    "embed": ("bert_jax.serve.cli:embed_main", "one vector per input line"),
    "convert": ("bert_jax.weights.cli:convert_main",
                "HF / Google TF checkpoints to and from bert_jax"),
    "extend-vocab": ("bert_jax.weights.cli:extend_vocab_main",
                     "add tokens to a model's vocabulary"),
    "export": ("bert_jax.serve.cli:export_main", "serving export of a fine-tuned model"),
    "compile": ("bert_jax.aot.cli:compile_main",
                "compile a pretraining step for a TPU slice or GPU hosts: fit, comms"),
}


def command_function(name: str) -> Callable[[list[str]], int | None]:
    """The function of command `name` (`COMMANDS`), its module imported now."""
    module, _, function = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), function)


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "usage: bert-jax COMMAND [FLAGS]  (bert-jax COMMAND --help; bert-jax --version)" \
        "\n\ncommands:\n" + \
        "\n".join(lines)


# Commands that import TensorFlow anyway (tf.data, TFRecords, event files, SavedModel).
TF_COMMANDS = ("train-tokenizer", "pretrain", "finetune", "distill", "evaluate",
               "predict", "export")


def _quiet_logging(verbose: bool) -> None:
    """Progress and results are ours to print.

    Below-warning logs of TensorFlow, absl and Orbax are hidden unless --verbose. Set before
    TensorFlow is imported. Level 3 also hides TensorFlow's C++ errors, such as `cuInit` failing on
    a machine without a GPU (TensorFlow only feeds the input pipeline; its real errors raise in
    Python)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "3")
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="bert-jax: %(levelname)s: %(message)s")
    for name in ("absl", "orbax", "jax", "tensorflow"):
        logging.getLogger(name).setLevel(level)
    # gcsfs logs each failed request with its traceback, and its fallbacks, before it raises:
    # the raised error is the one line we print.
    logging.getLogger("gcsfs").setLevel(logging.INFO if verbose else logging.CRITICAL)
    if not verbose:
        logging.getLogger("absl").addFilter(_hide_orbax_noise)


def quiet_libraries() -> None:
    """The quiet start of every command for scripts that run stages without `main` (the demo).

    No TensorFlow start-up lines (`cuInit` on a machine without a GPU), no library INFO logs or
    Orbax's `_CHECKPOINT_METADATA` warning."""
    _quiet_logging(verbose=False)
    tf_host.import_quietly()


def _hide_orbax_noise(record: logging.LogRecord) -> bool:
    """Hides Orbax's warning that a `_CHECKPOINT_METADATA` file is missing.

    Orbax warns so whenever a sub-item's metadata is read (as every restore does); it reads like
    corruption and is not."""
    return "_CHECKPOINT_METADATA" not in record.getMessage()


class _LibraryTracebacks:
    """Library tracebacks and Orbax's logged errors go to a file instead of the console.

    These are the tracebacks that libraries print from their own threads and callbacks (Orbax and
    TensorStore after a failed checkpoint write print hundreds). The file is created when first
    needed; the run's failure is reported in one line, which names the file. Process-wide
    (sys.excepthook, sys.unraisablehook, which TensorStore's callbacks use, threading.excepthook,
    and a filter on the errors logged to absl's and asyncio's loggers, used by libraries only): the
    CLI owns its process."""

    def __init__(self):
        self.name, self.path, self._installed = "", None, False

    def start(self, name: str, divert: bool) -> None:
        """Starts a new command: its tracebacks go to a new file.

        That is when `divert`; once installed, the hooks stay for the process."""
        self.name, self.path = name, None
        if divert and not self._installed:
            self._installed = True
            sys.excepthook = self.excepthook
            threading.excepthook = sys.unraisablehook = lambda a: self.excepthook(
                a.exc_type, a.exc_value, a.exc_traceback)
            logging.getLogger("absl").addFilter(self.filter)
            # asyncio's "Task exception was never retrieved" of Orbax's failed writes
            logging.getLogger("asyncio").addFilter(self.filter)
            library_log.set_file(self.write)  # our own reduced errors' full texts

    def write(self, text: str) -> str:
        if self.path is None:
            fd, self.path = tempfile.mkstemp(prefix=f"bert-jax-{self.name}-",
                                             suffix=".library-errors.txt")
            os.close(fd)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        return self.path

    def excepthook(self, *exc) -> None:
        self.write("".join(traceback.format_exception(*exc)))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.write(logging.Formatter().format(record))
            return False
        return True

    def mention(self, message: str = "") -> str:
        """Names the file for a one-line error, unless `message` names it already."""
        return f"; library errors in {self.path}" if self.path and self.path not in message \
            else ""


_LIBRARY_TRACEBACKS = _LibraryTracebacks()


def main(argv: list[str] | None = None) -> int:
    """Runs one command.

    Exit codes: 0 success; 2 the user's mistake, one line `bert-jax COMMAND: error: ...` (a
    UserError, which library exceptions that mean bad input are converted into where they enter our
    code; or an OSError of the user's making, `errors.is_users_os_error`: a missing file, no
    permission, a full disk; also a busy workdir, out of device memory); 1 a run that failed for
    another reason (a run that diverged: one line naming the step and what to change; anything else,
    a ValueError or KeyError too, is a bug: one line naming the file that holds its traceback); 130
    Ctrl-C or SIGTERM (one line; temporary files removed, workers ended; pretrain, finetune and
    distill save a checkpoint first and exit 0 on SIGTERM: `train/preemption.py`); 141, silently,
    when the reader of the output stops reading (`| head`), as for a shell's SIGPIPE. `--debug` or
    BERT_JAX_DEBUG=1 lets the exception's traceback through; `--verbose` shows the libraries' INFO
    logs."""
    if argv is None:  # the process's own command line: the process ends with the command
        end = stopping.ProcessEnd()
        try:
            end.ended(main(sys.argv[1:]))
        except SystemExit as e:  # argparse's --help (0) and usage errors (2)
            end.ended(e.code if isinstance(e.code, int) else int(e.code is not None))
            raise
        return end.code
    argv = list(argv)
    debug = "--debug" in argv or bool(os.environ.get("BERT_JAX_DEBUG"))
    verbose = "--verbose" in argv
    argv = [a for a in argv if a not in ("--debug", "--verbose")]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        print(f"bert-jax {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"bert-jax: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    compile_cache.configure()  # before JAX is imported; see bert_jax/host/compile_cache.py
    backend_env.configure_backends()  # likewise; see bert_jax/host/backend_env.py
    _quiet_logging(verbose)
    _LIBRARY_TRACEBACKS.start(name, divert=not (debug or verbose))
    try:
        # SIGTERM raises Interrupted, as Ctrl-C raises KeyboardInterrupt; installed before
        # JAX starts: see bert_jax/host/stopping.py.
        with stopping.stop_on_signals(name):
            if name in TF_COMMANDS and not verbose:
                tf_host.import_quietly()
            return command_function(name)(rest) or 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - each failure in one line
        if debug:
            raise
        return report_failure(f"bert-jax {name}", e)


def report_failure(prog: str, error: BaseException) -> int:
    """Prints the one line for a command's failure and returns its exit code.

    `prog`: the command as the user typed it, `bert-jax embed`. Line and code are as `main`
    describes them."""
    if isinstance(error, (Interrupted, KeyboardInterrupt)):
        print(f"{prog}: {str(error) or 'interrupted'}", file=sys.stderr)
        return 130
    if isinstance(error, BrokenPipeError):  # the reader stopped reading (`| head`): not a
        # failure to report; the exit code is a shell's for SIGPIPE, and stdout goes to
        # /dev/null so that Python's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    message = " ".join(str(error).split())  # one line, whatever the message holds
    if is_users_error(error):
        print(f"{prog}: error: {message}{_LIBRARY_TRACEBACKS.mention(message)}",
              file=sys.stderr)
        return 2
    if is_unreachable(error):
        print(f"{prog}: error: cannot reach the network: {message} (check the connection; "
              f"for a bucket, the credentials too){_LIBRARY_TRACEBACKS.mention(message)}",
              file=sys.stderr)
        return 2
    if isinstance(error, NonFiniteError):  # the run diverged: not a bug, nor the input's fault
        print(f"{prog}: error: {message}{_LIBRARY_TRACEBACKS.mention()}", file=sys.stderr)
        return 1
    path = _report_bug(prog, error)
    print(f"{prog}: internal error (a bug, please report it): "
          f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}; "
          f"full traceback in {path}", file=sys.stderr)
    return 1


def _report_bug(prog: str, error: BaseException) -> str:
    """Writes the traceback to a file; returns the file's path."""
    fd, path = tempfile.mkstemp(prefix=f"{prog.replace(' ', '-').removesuffix('.py')}-",
                                suffix=".traceback.txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        traceback.print_exception(error, file=f)
    return path


if __name__ == "__main__":
    sys.exit(main())
