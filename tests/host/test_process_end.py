"""A command run as its process ends with the command: a stop after its end cannot kill the
process by the signal (stopping.ProcessEnd), and later exit handlers still run."""

import subprocess
import sys
import textwrap
import time

import pytest


def _run(body):
    started = time.time()
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=60)
    return run, time.time() - started


def test_a_stop_after_the_command_ends_the_process_at_once_with_its_code():
    run, seconds = _run("""
        import os, signal, time
        from bert_jax.host.stopping import ProcessEnd
        end = ProcessEnd()
        end.ended(3)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
        """)
    assert run.returncode == 3, run.stderr
    assert seconds < 20 and run.stderr == ""


def test_the_exit_code_is_the_commands_and_later_exit_handlers_run():
    run, _ = _run("""
        import atexit
        from bert_jax.host.stopping import ProcessEnd
        end = ProcessEnd()
        atexit.register(print, "a library's exit handler")
        print("output", end="")  # buffered: flushed before the process ends
        end.ended(2)
        """)
    assert run.returncode == 2, run.stderr
    assert run.stdout == "outputa library's exit handler\n"


def test_an_exception_let_through_ends_with_code_1_and_its_traceback():
    run, _ = _run("""
        from bert_jax.host.stopping import ProcessEnd
        end = ProcessEnd()
        raise RuntimeError("a bug")
        """)
    assert run.returncode == 1
    assert "RuntimeError: a bug" in run.stderr


@pytest.mark.parametrize("flag, code", [("--help", 0), ("--no_such_flag", 2)])
def test_a_commands_own_exit_keeps_its_code(flag, code):
    """Cases: argparse's --help (exit 0) and a usage error (exit 2) through `bert-jax`."""
    run = subprocess.run([sys.executable, "-m", "bert_jax.cli", "tokenize", flag],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == code, run.stderr
