"""create-data's output in two steps, so workers (and hosts) write their own files.

The result does not depend on how many there are.

1. Each input file (index f) becomes one *part*: its records, in order, as a TFRecord
   file grouped by residue (record j in group j % S, S the number of shards), and a
   small JSON beside it (the groups' record counts and byte offsets, the file's Stats).
   A part is written under a temporary name and renamed, JSON last: a part whose JSON
   exists is complete, which makes conversion resumable.
2. Shards are assembled from byte ranges of the parts: record j of file f is global
   record offset_f + j (offset_f: the records of files before f) and goes to shard
   (offset_f + j) % S, as one writer dealing every record round-robin in file order
   would. Each shard is written by one process, from the parts alone.
"""
from __future__ import annotations

import errno
import json
from typing import Dict, List, Sequence, Tuple

from bert_jax.data import record_formats, tfrecord
from bert_jax.errors import UserError
from bert_jax.host import paths

_COPY_CHUNK = 8 << 20

Piece = Tuple[str, int, int]  # (part path, start byte, end byte)


class DiskFullError(UserError):
    """No space left while writing create-data's output (the path is named)."""


def part_path(parts_dir: str, index: int) -> str:
    return paths.join(parts_dir, f"part-{index:06d}.tfrecord")


def _meta_path(parts_dir: str, index: int) -> str:
    return paths.join(parts_dir, f"part-{index:06d}.json")


def disk_full(error: OSError, path: str) -> Exception:
    """A one-line error naming `path` for a full disk; other errors unchanged."""
    if error.errno == errno.ENOSPC:
        return DiskFullError(f"no space left on the device of {path}: free space there "
                             "(this run's temporary files were removed) and run again")
    return error


def write_part(records: Sequence[bytes], parts_dir: str, index: int, num_shards: int,
               meta: dict) -> dict:
    """Writes the part of input file `index` and its JSON; returns the JSON's content.

    The JSON is `meta` plus `counts`, `offsets`: records and byte start of each residue group,
    offsets[-1] the size."""
    counts, offsets, position = [], [], 0
    path = part_path(parts_dir, index)
    tmp = paths.temporary_sibling(path)
    try:
        with paths.open(tmp, "wb") as f:
            for residue in range(num_shards):
                group = records[residue::num_shards]
                offsets.append(position)
                counts.append(len(group))
                for record in group:
                    framed = tfrecord.frame(record)
                    f.write(framed)
                    position += len(framed)
        paths.move(tmp, path)
        meta = dict(meta, index=index, counts=counts, offsets=offsets + [position])
        paths.write_text(_meta_path(parts_dir, index), json.dumps(meta))
    except OSError as e:
        if paths.exists(tmp):
            paths.remove(tmp)
        raise disk_full(e, path) from e
    return meta


def finished_parts(parts_dir: str, plan: str) -> Dict[int, dict]:
    """{index: JSON} of the complete parts in `parts_dir` made with `plan`.

    `plan`: a key of the inputs and options. Parts of another plan are ignored (and rewritten)."""
    found = {}
    for path in paths.glob(paths.join(parts_dir, "part-*.json")):
        try:
            meta = json.loads(paths.read_text(path))
        except (OSError, ValueError):
            continue  # cut short: that part is made again
        if meta.get("plan") == plan:
            found[meta["index"]] = meta
    return found


def shard_pieces(metas: Sequence[dict], parts_dir: str, num_shards: int) -> List[List[Piece]]:
    """The byte ranges of each shard, from the parts' JSON in input order."""
    pieces: List[List[Piece]] = [[] for _ in range(num_shards)]
    offset = 0
    for meta in metas:
        path = part_path(parts_dir, meta["index"])
        for shard in range(num_shards):
            residue = (shard - offset) % num_shards
            start, end = meta["offsets"][residue], meta["offsets"][residue + 1]
            if end > start:
                pieces[shard].append((path, start, end))
        offset += sum(meta["counts"])
    return pieces


def assemble_shard(task: Tuple[str, List[Piece], str]) -> str:
    """Writes one shard (`task`: its path, pieces and format) under a temporary name.

    Returns that name, renamed by the caller once every shard is complete."""
    path, pieces, record_format = task
    tmp = paths.temporary_sibling(path)
    write_shard(tmp, pieces, record_format, path)
    return tmp


def write_shard(target: str, pieces: List[Piece], record_format: str, path: str = "") -> None:
    """Writes the records of `pieces` to `target` in `record_format` (`record_formats`).

    TFRecord pieces are copied as bytes; `path`: the shard's final name, for a full disk's error."""
    try:
        if record_format == "tfrecord":
            with paths.open(target, "wb") as out:
                for piece in pieces:
                    _copy_range(piece, out)
        else:
            record_formats.write_records(
                target, (record for source, start, end in pieces
                         for record in tfrecord.read_range(source, start, end)), record_format)
    except OSError as e:
        if paths.exists(target):
            paths.remove(target)
        raise disk_full(e, path or target) from e


def _copy_range(piece: Piece, out) -> None:
    source, start, end = piece
    with paths.open(source, "rb") as f:
        f.seek(start)
        left = end - start
        while left:
            chunk = f.read(min(_COPY_CHUNK, left))
            if not chunk:
                raise UserError(f"{source} is cut short: remove it and its "
                                ".json, and run again to remake it")
            out.write(chunk)
            left -= len(chunk)
