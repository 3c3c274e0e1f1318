"""create-data on a corpus that is one long line (a file without newlines) against the
same text in BERT's format (a sentence per line): seconds, MB/s, rows and tokens kept.

    PYTHONPATH=. python bench/bench_long_line.py --sizes 0.5,1,10

Issue 44 measured 48 s for 0.5 MB and over 17 minutes for 10 MB of one line, keeping
5 rows (640 tokens); linear splitting should make both kinds run at about the same MB/s
and keep about the same number of tokens. (The first case of a run includes loading
TensorFlow and the tokenizer, about 10 s.)

Measured 2026-11-26 on the shared 2-core machine, --dupe_factor 1:
  before (527219b): one line 0.5 MB 3.5 s, 1 MB 17.4 s, 2 MB 85.0 s,
    each keeping 1 row of 128 tokens (a sentence per line: 2 MB 1.3 s, 567,260 tokens)
  after: one line 2 MB 3.5 s (595,484 tokens kept), 10 MB 15.9 s = 0.63 MB/s
    (2,849,475 tokens); a sentence per line 10 MB 12.2 s = 0.82 MB/s (2,733,944 tokens)
"""
import argparse
import glob
import gzip
import io
import json
import os
import tempfile
import time
from contextlib import redirect_stdout

from bert_jax.data import corpus
from bert_jax.data import create_pretraining_data as cpd


def sentences(megabytes: float) -> list:
    """Sentences of the embedded corpus, repeated up to `megabytes` of text."""
    lines = []
    for path in sorted(glob.glob(corpus.DEFAULT_CORPUS)):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines += [line.strip() for line in f if line.strip()]
    out, size = [], 0
    while size < megabytes * 1e6:
        for line in lines:
            out.append(line)
            size += len(line) + 1
            if size >= megabytes * 1e6:
                break
    return out


def run(path: str, out_dir: str, dupe_factor: int) -> dict:
    start = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        code = cpd.main(["--input", path, "--output_dir", out_dir,
                         "--dupe_factor", str(dupe_factor),
                         "--num_workers", "1", "--num_shards", "1", "--no_progress"])
    seconds = time.perf_counter() - start
    assert code == 0, code
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    return {"seconds": seconds, "rows": summary["instances"], "tokens": summary["tokens"],
            "split_lines": summary.get("split_lines", "-")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="0.5,1", help="megabytes, comma-separated")
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--kinds", default="lines,one", help="lines (a sentence per "
                        "line) and/or one (one long line)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in map(float, args.sizes.split(",")):
            text = sentences(megabytes)
            bodies = {"lines": ("a sentence per line", "\n".join(text) + "\n"),
                      "one": ("one line", " ".join(text))}
            for kind, body in (bodies[name] for name in args.kinds.split(",")):
                path = os.path.join(tmp, "input.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
                result = run(path, os.path.join(tmp, f"out-{megabytes}-{len(kind)}"),
                             args.dupe_factor)
                print(f"{megabytes:5.1f} MB {kind:>20}: {result['seconds']:7.1f} s, "
                      f"{megabytes / result['seconds']:.3f} MB/s, {result['rows']} rows, "
                      f"{result['tokens']} tokens, split_lines {result['split_lines']}",
                      flush=True)


if __name__ == "__main__":
    main()
