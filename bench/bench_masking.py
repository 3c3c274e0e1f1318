"""BERT's masking (`data.masking.mask_batch`) against its implementation at an earlier
commit, side by side in one process (interleaved, best of --repeats): rows masked per
second at seq 128 and 512, per token and whole-word, and whether both give the same
masks for the same keys.

    python bench/bench_masking.py --against 4d90d01 [--batch 256] [--repeats 3]
"""
import importlib.util
import os
import subprocess
import tempfile
import time

import numpy as np

from bert_jax import flags
from bert_jax.data import masking

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_at(commit: str):
    """bert_jax/data/masking.py as it was at `commit`, imported on its own."""
    source = subprocess.run(["git", "show", f"{commit}:bert_jax/data/masking.py"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "masking_then.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("masking_then", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(batch: int, length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(length // 2, length + 1, batch)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 30000, (batch, length)) * mask
    ids[:, 0] = 2
    ids[np.arange(batch), lengths - 1] = 3
    return ids, mask, rng.random((batch, length)) < 0.7


def main() -> None:
    parser = flags.ArgumentParser(description=__doc__)
    parser.add_argument("--against", required=True, help="the commit to compare with")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    then = module_at(args.against)
    for length, predictions in ((128, 20), (512, 80)):
        ids, mask, starts = rows(args.batch, length)
        keys = masking.example_keys(1, np.arange(args.batch))
        for word_start in (None, starts):
            call = lambda m: m.mask_batch(ids, mask, keys, vocab_size=30522, mask_id=4,
                                          cls_id=2, sep_id=3, max_predictions=predictions,
                                          word_start=word_start)
            same = all(np.array_equal(a, b) for a, b in
                       zip(call(masking).values(), call(then).values()))
            best = {"now": 0.0, "then": 0.0}
            for _ in range(args.repeats):
                for name, module in (("now", masking), ("then", then)):
                    start = time.perf_counter()
                    for _ in range(10):
                        call(module)
                    best[name] = max(best[name],
                                     10 * args.batch / (time.perf_counter() - start))
            kind = "whole-word" if word_start is not None else "per token"
            print(f"seq {length} {kind:<10}: now {best['now']:>9,.0f} rows/s, "
                  f"{args.against} {best['then']:>9,.0f} rows/s, "
                  f"{best['now'] / best['then']:.2f}x; same masks: {same}")


if __name__ == "__main__":
    main()
