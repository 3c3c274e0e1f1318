"""Pretraining step throughput: bert_jax vs transformers' PyTorch BertForPreTraining,
side by side in one process on the same machine.

    python bench/bench_pretrain.py [--models bert-base,tiny] [--steps 3]

Both sides run a full training step (forward, backward, AdamW update with
clipping) on random batches of the same shape, fp32. Ours computes the MLM head
only at the masked positions (P = 20 of L = 128); transformers computes it at
every position and ignores the unmasked labels, as it always does. MFU counts
the same model FLOPs for both (masked positions only), against a measured
matmul peak of this machine.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from bert_jax import perf, sharding
from bert_jax.config import get_config
from bert_jax.heads import BertForPreTraining
from bert_jax.optim import make_optimizer
from bert_jax.train import dummy_inputs, jit_steps

# (preset, batch size) at sequence length 128 with 20 predictions per row.
CASES = {"bert-base": 8, "tiny": 32}
LENGTH, PREDICTIONS = 128, 20


def random_batch(config, batch_size, rng):
    positions = np.sort(np.stack([rng.choice(np.arange(1, LENGTH), PREDICTIONS, replace=False)
                                  for _ in range(batch_size)]), -1).astype(np.int32)
    return {
        "input_ids": rng.integers(5, config.vocab_size, (batch_size, LENGTH)).astype(np.int32),
        "input_mask": np.ones((batch_size, LENGTH), np.int32),
        "segment_ids": (np.arange(LENGTH)[None] >= LENGTH // 2).astype(np.int32).repeat(
            batch_size, 0),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(5, config.vocab_size, (batch_size, PREDICTIONS)).astype(
            np.int32),
        "masked_lm_weights": np.ones((batch_size, PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, batch_size).astype(np.int32),
    }


def time_steps(step, steps, warmup=2):
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def bench_jax(config, batch_size, steps):
    mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
    model = BertForPreTraining(config)
    tx, schedule = make_optimizer(learning_rate=1e-4, num_train_steps=1000, warmup_steps=10)
    init_fn = lambda key: model.init(key, *dummy_inputs(1, LENGTH, PREDICTIONS))["params"]
    state, shardings = sharding.create_sharded_state(init_fn, tx, mesh)
    train, _ = jit_steps(model, tx, schedule, mesh, shardings, sharding.DEFAULT_LOGICAL_AXIS_RULES)
    batch = sharding.global_batch(random_batch(config, batch_size, np.random.default_rng(0)), mesh)
    holder = [state]

    def step():
        holder[0], metrics = train(holder[0], batch)
        jax.block_until_ready(metrics["loss"])

    with jax.set_mesh(mesh):
        return time_steps(step, steps)


def bench_torch(config, batch_size, steps):
    import torch
    import transformers
    hf_config = transformers.BertConfig(**config.to_hf_dict())
    model = transformers.BertForPreTraining(hf_config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    batch = random_batch(config, batch_size, np.random.default_rng(0))
    labels = np.full((batch_size, LENGTH), -100, np.int64)
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    inputs = dict(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                  attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                  token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                  labels=torch.tensor(labels),
                  next_sentence_label=torch.tensor(batch["next_sentence_labels"],
                                                   dtype=torch.long))

    def step():
        optimizer.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return time_steps(step, steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    peak = perf.measured_matmul_flops(size=2048, seconds=2.0)
    print(f"machine: {jax.devices()[0].device_kind}, measured fp32 matmul peak "
          f"{peak / 1e9:.0f} GFLOP/s")
    header = f"{'model':<10} {'batch':>5} {'side':<13} {'s/step':>7} {'tokens/s':>9} {'MFU':>6}"
    print(header)
    for name in args.models.split(","):
        config = get_config(name)
        batch_size = CASES[name]
        flops = batch_size * perf.train_flops_per_example(config, LENGTH, PREDICTIONS)
        results = {"bert_jax": bench_jax(config, batch_size, args.steps),
                   "torch (HF)": bench_torch(config, batch_size, args.steps)}
        for side, seconds in results.items():
            print(f"{name:<10} {batch_size:>5} {side:<13} {seconds:>7.3f} "
                  f"{batch_size * LENGTH / seconds:>9.0f} {flops / seconds / peak:>6.1%}")
        print(f"{name:<10} bert_jax / torch tokens/s ratio: "
              f"{results['torch (HF)'] / results['bert_jax']:.2f}x")


if __name__ == "__main__":
    main()
