"""Decoding text files.

UTF-8, or UTF-16/32 when a byte-order mark says so; any other bytes (Latin-1, cp1252, ...) are
refused naming the file, the line and the byte rather than dropped or replaced. One place for every
reader (corpus, fine-tuning files, embed, tokenize) and JSON file (`read_json`)."""

from __future__ import annotations

import codecs
import io
import json
from typing import IO, Any, Iterator

from bert_jax.errors import UserError
from bert_jax.host import paths

# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))
CONVERT = "convert it to UTF-8 first, e.g. `iconv -f latin1 -t utf-8` for Latin-1 text"
DEFAULT = "utf-8"  # with UTF-16/32 read after a byte-order mark


def check_name(name: str) -> str:
    """The codec's canonical name; UserError for a name Python does not know."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise UserError(f"unknown encoding {name!r}: use a Python codec name such as "
                        "utf-8, latin-1, cp1252, utf-16") from None


def is_default(name: str) -> bool:
    """UTF-8, read as `decode_line`/`decode` do (a byte-order mark detected)."""
    return check_name(name) == DEFAULT


def named_lines(binary: IO[bytes], path: str, name: str) -> Iterator[str]:
    """The lines (newlines kept) of a stream in the codec the user named."""
    text = io.TextIOWrapper(binary, encoding=name, newline="")
    number = 0
    try:
        for number, line in enumerate(text, 1):
            yield line
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not valid {name} text after line {number} (byte "
                        f"{e.object[e.start]:#04x}): {e.reason}") from None
    finally:
        text.detach()


def codec_of(head: bytes) -> str:
    """The codec of a file that starts with `head` (its first 4 bytes or more)."""
    return next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8")


def not_utf8(path: str, line: int, data: bytes, index: int, start: int = 0) -> UserError:
    """The error for byte `data[index]`; `start`: the file offset of `data`."""
    return UserError(f"{path}:{line}: not UTF-8 text (byte {data[index]:#04x} at offset "
                     f"{start + index}); {CONVERT}")


def decode(data: bytes, path: str) -> str:
    """The text of a whole file (a byte-order mark dropped)."""
    codec = codec_of(data[:4])
    try:
        return data.decode(codec)
    except UnicodeDecodeError as e:
        if codec != "utf-8" and codec != "utf-8-sig":
            raise UserError(f"{path}: not valid {codec.upper()} text after its byte-order "
                            f"mark (offset {e.start}): {e.reason}") from None
        raise not_utf8(path, data.count(b"\n", 0, e.start) + 1, data, e.start) from None


def read_json(path: str) -> Any:
    """A JSON file the user gave (a model's or a tokenizer's settings).

    One that is not JSON, or not UTF-8, fails in one line naming the file and the line."""
    if not paths.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    text = decode(paths.read_bytes(path), path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def decode_line(raw: bytes, path: str, line: int, start: int) -> str:
    """One UTF-8 line of a file read line by line; `start`: its offset in the file."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(path, line, raw, e.start, start) from None
