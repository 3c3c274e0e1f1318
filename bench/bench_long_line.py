"""create-data on a corpus that is one long line (a file without newlines) against the
same text in BERT's format (a sentence per line): seconds, MB/s, rows and tokens kept.

    PYTHONPATH=. python bench/bench_long_line.py --sizes 0.5,1,10

Issue 44 measured 48 s for 0.5 MB and over 17 minutes for 10 MB of one line, keeping
5 rows (640 tokens); linear splitting should make both kinds run at about the same MB/s
and keep about the same number of tokens.
"""
import argparse
import gzip
import glob
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


def run(path: str, out_dir: str) -> dict:
    start = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        code = cpd.main(["--input", path, "--output_dir", out_dir, "--dupe_factor", "1",
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in map(float, args.sizes.split(",")):
            text = sentences(megabytes)
            for kind, body in (("a sentence per line", "\n".join(text) + "\n"),
                               ("one line", " ".join(text))):
                path = os.path.join(tmp, "input.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
                result = run(path, os.path.join(tmp, f"out-{megabytes}-{len(kind)}"))
                print(f"{megabytes:5.1f} MB {kind:>20}: {result['seconds']:7.1f} s, "
                      f"{megabytes / result['seconds']:.3f} MB/s, {result['rows']} rows, "
                      f"{result['tokens']} tokens, split_lines {result['split_lines']}",
                      flush=True)


if __name__ == "__main__":
    main()
