"""Reading pretraining text in BERT's format, and the embedded default corpus.

BERT format: one sentence per line, a blank line between documents, UTF-8 (or
UTF-16/32 with a byte-order mark), optionally gzip-compressed (`.gz`). Bytes that are
not text in that encoding fail naming the file and line (`bert_jax.host.encoding`): a
Latin-1 file would otherwise lose its accented letters.
"""
import contextlib
import dataclasses
import gzip
import itertools
import re
import zlib
from typing import Callable, Iterable, Iterator, List, Sequence, TypeVar

from bert_jax import RESOURCES
from bert_jax.errors import UserError
from bert_jax.host import encoding, paths

T = TypeVar("T")

CORPUS_DIR = paths.join(RESOURCES, "corpus")
# Public-domain text: the King James Bible and the latest 100 State of the
# Union addresses (see resources/corpus/README.md), gzip shards in BERT format.
DEFAULT_CORPUS = paths.join(CORPUS_DIR, "*.txt.gz")


@dataclasses.dataclass
class ReadStats:
    """What reading found; summed over files with `+=`."""
    files: int = 0
    empty_files: int = 0
    documents: int = 0
    lines: int = 0
    bytes: int = 0

    def __iadd__(self, other: "ReadStats") -> "ReadStats":
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self


def expand_inputs(patterns: Sequence[str]) -> List[str]:
    """Sorted files matching comma-separated globs; fails at once if any is missing."""
    files = []
    for pattern in patterns:
        for part in filter(None, (p.strip() for p in pattern.split(","))):
            matches = paths.glob(part)
            if not matches:
                raise FileNotFoundError(f"input file not found: {part}")
            files.extend(m for m in matches if paths.isfile(m))
    if not files:
        raise FileNotFoundError(f"no input files in {list(patterns)}")
    return files


def require_text(files: Sequence[str], codec: str = encoding.DEFAULT) -> None:
    """Raises UserError unless some file holds a non-blank line.

    An empty corpus makes empty shards or an empty vocabulary, never an error of its own. Reads up
    to the first line with text."""
    for path in files:
        if any(iter_lines(path, ReadStats(), codec)):
            return
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    raise UserError(f"no text in the input ({shown}): the files are empty or blank")


def check_starts(files: Sequence[str], codec: str = encoding.DEFAULT, lines: int = 1000) -> None:
    """Reads the first `lines` lines of each local file: bytes that are not text fail now.

    For engines whose workers would find them only later, far from the user (UserError naming the
    file and line). Files in a bucket are left to the workers."""
    for path in files:
        if not paths.is_remote(path):
            for _ in itertools.islice(iter_lines(path, ReadStats(), codec), lines):
                pass


@contextlib.contextmanager
def _open_binary(path: str):
    with paths.open(path, "rb") as f:  # streamed from a bucket
        yield gzip.open(f, "rb") if path.endswith(".gz") else f


def _checked_gzip(lines: Iterator[bytes], path: str) -> Iterator[bytes]:
    """`lines`, with a truncated or corrupt gzip file reported as a UserError naming it."""
    try:
        yield from lines
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise UserError(f"{path}: truncated or corrupt gzip file ({e}); download or "
                        "compress it again") from None


def iter_lines(path: str, stats: ReadStats, codec: str = encoding.DEFAULT) -> Iterator[str]:
    """Stripped lines of one file, decoded by `bert_jax.host.encoding` or in `codec`.

    The encoding module reads UTF-8, or UTF-16/32 after a byte-order mark, read whole; other bytes
    raise UserError naming the line. `codec`: the one the user named."""
    stats.files += 1
    size = 0
    if not encoding.is_default(codec):
        with _open_binary(path) as f:
            for line in _checked_gzip(encoding.named_lines(f, path, codec), path):
                size += len(line)
                stats.bytes += len(line.encode(codec, "replace"))
                yield line.strip()
        stats.empty_files += size == 0
        return
    with _open_binary(path) as f:
        raws = _checked_gzip(f, path)
        for number, raw in enumerate(raws, 1):
            if number == 1 and encoding.codec_of(raw[:4]) != "utf-8":
                raw = raw + b"".join(raws)  # UTF-16/32 newlines span the byte lines
                stats.bytes += len(raw)
                size += len(raw)
                yield from (line.strip() for line in encoding.decode(raw, path).splitlines())
                break
            line = encoding.decode_line(raw, path, number, size)
            size += len(raw)
            stats.bytes += len(raw)
            yield line.strip()
    if size == 0:
        stats.empty_files += 1


def read_documents(path: str, stats: ReadStats,
                   codec: str = encoding.DEFAULT) -> List[List[str]]:
    """The documents of one file: lists of non-empty sentences."""
    return split_documents(iter_lines(path, stats, codec), stats)


def split_documents(lines: Iterable[T], stats: ReadStats,
                    text: Callable[[T], str] = lambda line: line) -> List[List[T]]:
    """Lines grouped into documents at blank lines (`text(line)` empty), blank lines dropped.

    Counts the non-blank lines and the documents in `stats`."""
    documents, current = [], []
    for line in lines:
        if text(line):
            current.append(line)
            stats.lines += 1
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    stats.documents += len(documents)
    return documents


# After . ! ? and a space, or after a CJK full stop, exclamation or question mark.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])")


def split_long_line(line: str, piece: int) -> List[str]:
    """The sentences of an over-long `line` (a paragraph or a whole file on one line).

    Each one longer than `piece` characters is cut after its last space before `piece` (or at
    `piece`, for text without spaces). Linear in the line's length."""
    out = []
    for sentence in _SENTENCE_END.split(line):
        start = 0
        while len(sentence) - start > piece:
            cut = sentence.rfind(" ", start + piece // 2, start + piece)
            cut = cut if cut > start else start + piece
            out.append(sentence[start:cut].strip())
            start = cut
        out.append(sentence[start:].strip())
    return [text for text in out if text]
