"""The rule for what a command prints when it fails through the user: one line in our words.

`LIBRARY_PHRASES` are what libraries once printed through our commands (issue 66): tensorstore
on a full disk, tfds on a split smaller than its pieces, concurrent.futures on `--workers 0`,
the operating system on a symlink loop or a folder being emptied, a bare KeyError's key, a
NumPy broadcast, a float conversion. A line holding one is a library's error reaching the user
unconverted."""

from __future__ import annotations

LIBRARY_PHRASES = (
    "RESOURCE_EXHAUSTED: Error writing", "OCDBT", "corresponds to no data",
    "max_workers must be", "[Errno 17]", "[Errno 39]", "[Errno 40]", "Traceback",
    "operands could not be broadcast", "cannot convert float", "KeyError",
)


def assert_our_words(message: str) -> None:
    """`message` (a UserError's text or a failure line) holds no library phrase and says more
    than a bare name: at least what is wrong and where."""
    found = [phrase for phrase in LIBRARY_PHRASES if phrase in message]
    assert not found, f"library words {found} in: {message}"
    text = message.split(": error: ", 1)[-1]
    assert len(text.split()) >= 4, f"too bare to say what is wrong and where: {message}"


def assert_failure_line(err: str, command: str) -> None:
    """`err` (a command's whole stderr) is one line `bert-jax COMMAND: error: ...` in our
    words."""
    assert err.startswith(f"bert-jax {command}: error: ") and err.count("\n") == 1, err
    assert_our_words(err)
