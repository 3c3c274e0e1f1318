"""FP8 against bf16 on real text: the loss curves of the same pretraining run with the
fast numerics and with `compute_dtype=fp8`, same data, same initial weights.

    python bench/bench_fp8_convergence.py --prepare runs/fp8_data.npz   # needs tensorflow
    python bench/bench_fp8_convergence.py --data runs/fp8_data.npz \\
        [--model bert-base --batch 64 --steps 300 --learning_rate 1e-4]

`--prepare` runs `bert-jax create-data` on the embedded corpus (seq 128, 20 predictions,
static masks, 3 copies) and stores its rows as one compressed .npz (12 MB), so the GPU
machine that measures needs neither tensorflow nor the corpus (copy the file to it). The run
then trains each side in its own process over the same rows in the same order and prints
the mean loss of each window of 25 steps for both sides, their relative gap, and one JSON
line.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
            "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
WINDOW = 25


def prepare(out: str) -> None:
    import tensorflow as tf
    with tempfile.TemporaryDirectory() as tmp:
        corpus = sorted(glob.glob(os.path.join(REPO, "bert_jax/resources/corpus/*.txt.gz")))
        subprocess.run([sys.executable, "-m", "bert_jax.cli", "create-data", "--input",
                        *corpus, "--output", tmp, "--max_seq_length", "128",
                        "--max_predictions_per_seq", "20", "--dupe_factor", "3",
                        "--no_progress"], check=True)
        rows = {name: [] for name in FEATURES}
        for path in sorted(glob.glob(os.path.join(tmp, "*.tfrecord"))):
            for record in tf.data.TFRecordDataset(path):
                features = tf.train.Example.FromString(record.numpy()).features.feature
                for name in FEATURES:
                    value = features[name]
                    rows[name].append(value.float_list.value if name == "masked_lm_weights"
                                      else value.int64_list.value)
    np.savez_compressed(out, **{name: np.array(values, np.float32 if name ==
                                               "masked_lm_weights" else np.int32)
                                for name, values in rows.items()})
    print(f"{len(rows['input_ids'])} rows -> {out}")


def worker(args) -> list[float]:
    """One side's loss at every step."""
    import bench_pretrain
    import jax

    from bert_jax.models.heads import BertForPreTraining
    from bert_jax.pretrain.steps import BertPretraining, dummy_inputs, jit_steps
    from bert_jax.train import sharding
    from bert_jax.train.optim import make_optimizer
    from bert_jax.train.train_state import StatePlan
    data = np.load(args.data)
    # bf16 on every backend: FP8 is compared with bf16 (XLA's CPU compiler may skip a
    # float32 -> float8 -> float32 round trip as excess precision).
    config = bench_pretrain.jax_model_config(args, True).replace(
        vocab_size=8192)  # the bundled vocabulary create-data used
    partitioner = sharding.Partitioner(sharding.make_mesh({"data": 1}, devices=jax.devices()[:1]))
    model = BertForPreTraining(config)
    tx, _ = make_optimizer(learning_rate=args.learning_rate, num_train_steps=args.steps,
                           warmup_steps=args.steps // 10)
    init_fn = lambda key: model.init(key, *dummy_inputs(1, 128, 20))["params"]
    plan = StatePlan.build(init_fn, tx, partitioner, rng_impl="unsafe_rbg")
    state = plan.create(0)
    train, _ = jit_steps(BertPretraining(model, partitioner.rules), tx, partitioner,
                         plan.shardings)
    order = np.random.default_rng(0).permutation(len(data["input_ids"]))
    losses = []
    for step in range(args.steps):
        rows = order[(np.arange(args.batch) + step * args.batch) % len(order)]
        batch = partitioner.global_batch({k: data[k][rows] for k in FEATURES})
        with jax.set_mesh(partitioner.mesh):
            state, metrics = train(state, batch)
        losses.append(metrics["loss"])
    return [float(x) for x in jax.device_get(losses)]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", metavar="NPZ", help="write the rows and stop")
    parser.add_argument("--data", metavar="NPZ")
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--numerics", default=None, help=argparse.SUPPRESS)  # worker side
    args = parser.parse_args()
    if args.prepare:
        return prepare(args.prepare)
    if not args.data:
        sys.exit("bench_fp8_convergence: pass --data NPZ (made by --prepare)")
    if args.numerics:
        args.scan_layers, args.hidden_act = False, None
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return
    curves = {}
    for numerics in ("fast", "fp8"):
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--numerics", numerics],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH":
                              os.pathsep.join(filter(None, [REPO, os.path.dirname(__file__),
                                                            os.environ.get("PYTHONPATH")]))})
        result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not result:
            sys.exit(f"bench_fp8_convergence: the {numerics} side failed:\n{done.stderr[-2000:]}")
        curves[numerics] = np.array(json.loads(result[0][len("RESULT "):]))
    print(f"{'steps':>10}{'bf16 loss':>11}{'fp8 loss':>10}{'gap':>8}")
    for start in range(0, args.steps, WINDOW):
        bf16, fp8 = (curves[n][start:start + WINDOW].mean() for n in ("fast", "fp8"))
        print(f"{start:>4}-{start + WINDOW - 1:<5}{bf16:>11.3f}{fp8:>10.3f}"
              f"{(fp8 - bf16) / bf16:>8.1%}")
    print(json.dumps({"model": args.model, "batch": args.batch, "steps": args.steps,
                      "learning_rate": args.learning_rate,
                      "loss": {n: c.tolist() for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
