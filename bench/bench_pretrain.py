"""Pretraining step throughput: bert_jax vs transformers' PyTorch BertForPreTraining on
whatever backend is present, each side in its own process.

    python bench/bench_pretrain.py [--models bert-base,bert-large] [--steps 10]
        [--sides bert_jax,torch_eager,torch_compile] [--numerics auto|fast|faithful|fp8]
        [--packed] [--hidden_act gelu_new] [--scan_layers] [--batch N]
    python bench/bench_pretrain.py --model bert-large --seq_len 512 --packed --numerics fp8

GPU/TPU: bert-base seq 128 batch 256, bert-large seq 128 batch 128, bert-large seq 512
batch 32 (80 predictions); bert_jax with the fast numerics (bf16, fused attention
without attention-probability dropout, unsafe_rbg; `--numerics faithful`: BERT's einsum
attention with its dropout and threefry, still bf16) against transformers eager and
`torch.compile`, both with bf16 autocast, fused AdamW and their default SDPA attention
(and BERT's dropouts). CPU: fp32, bert-base batch 8 and tiny batch 32 at seq 128 with
BERT's numerics, against transformers eager.

Every side runs a full training step (forward, backward, AdamW with clipping) on
random batches of the same shape. Ours computes the MLM head only at the masked
positions; transformers computes it at every position, as it always does. MFU counts
the same model FLOPs for all sides (masked positions only) against the device's dense
bf16 peak (bert_jax/train/perf.py), or on a CPU against a measured fp32 matmul peak.
`--numerics fp8` is the fast numerics with the encoder's matmuls in FP8. `--packed`
feeds bert_jax rows packed from the embedded corpus's example lengths
(bench/corpus_lengths_512.json), so samples/s (MLPerf's unit: sequences a second)
exceeds seq/s (rows) by the examples per row; the torch sides get the same rows' shapes
unpacked, one sample a row. Prints a table, the ratios, and last one JSON line (see
`report`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# (model, seq_len, batch, predictions per row) by backend kind.
CASES = {
    "accelerator": [("bert-base", 128, 256, 20), ("bert-large", 128, 128, 20),
                    ("bert-large", 512, 32, 80)],
    "cpu": [("bert-base", 128, 8, 20), ("tiny", 128, 32, 20), ("bert-large", 128, 4, 20)],
}
DEFAULT_CPU_MODELS = ("bert-base", "tiny")
SIDES = ("bert_jax", "torch_eager", "torch_compile")


def random_batch(vocab_size, batch_size, length, predictions, seed=0):
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, length), predictions, replace=False)
                                  for _ in range(batch_size)]), -1).astype(np.int32)
    return {
        "input_ids": rng.integers(5, vocab_size, (batch_size, length)).astype(np.int32),
        "input_mask": np.ones((batch_size, length), np.int32),
        "segment_ids": (np.arange(length)[None] >= length // 2).astype(np.int32).repeat(
            batch_size, 0),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(5, vocab_size, (batch_size, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((batch_size, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, batch_size).astype(np.int32),
    }


def corpus_lengths(path=os.path.join(REPO, "bench", "corpus_lengths_512.json")):
    """The embedded corpus's example lengths at seq 512 (bench/corpus_lengths_512.json,
    from `bert-jax create-data`): (lengths, their counts)."""
    with open(path) as f:
        counts = json.load(f)["counts"]
    return np.array([int(k) for k in counts]), np.array(list(counts.values()))


def packed_batch(vocab_size, batch_size, length, predictions, max_examples=3, seed=0):
    """Rows of examples whose lengths follow the embedded corpus's (cut to `length`),
    packed in stream order as bert_jax's pipeline packs them: an example joins the row
    while tokens, masked positions (15% of its tokens) and `max_examples` allow. Returns
    (batch, examples in it)."""
    from bert_jax.data import packing
    rng = np.random.default_rng(seed)
    values, counts = corpus_lengths()
    rows, current, used, slots = [], [], 0, 0
    sizes = []
    while len(rows) < batch_size:
        n = int(min(rng.choice(values, p=counts / counts.sum()), length))
        count = min(max(1, round(0.15 * n)), predictions)
        if not packing.row_fits(used, slots, len(current), n, count, length, predictions,
                                max_examples):
            rows.append(current)
            current, used, slots = [], 0, 0
        current.append(len(sizes))
        sizes.append((n, count))
        used, slots = used + n, slots + count
    examples = {"input_ids": rng.integers(5, vocab_size, (len(sizes), length)).astype(np.int32),
                "input_mask": (np.arange(length) < np.array([n for n, _ in sizes])[:, None]
                               ).astype(np.int32),
                "masked_lm_positions": np.zeros((len(sizes), predictions), np.int32),
                "masked_lm_ids": rng.integers(5, vocab_size, (len(sizes), predictions)),
                "masked_lm_weights": np.zeros((len(sizes), predictions), np.float32),
                "next_sentence_labels": rng.integers(0, 2, len(sizes)).astype(np.int32)}
    examples["segment_ids"] = (np.arange(length) >= examples["input_mask"].sum(1,
                               keepdims=True) // 2).astype(np.int32) * examples["input_mask"]
    for i, (n, count) in enumerate(sizes):
        examples["masked_lm_positions"][i, :count] = np.sort(
            rng.choice(np.arange(1, n), count, replace=False)) if n > 1 else 0
        examples["masked_lm_weights"][i, :count] = 1
    batch = packing.pack_rows(examples, rows, length, predictions, max_examples)
    return batch, sum(len(r) for r in rows)


def timed(step, steps, sync):
    """(first step seconds, compile included; mean seconds of `steps` later steps)."""
    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start
    step()  # a second untimed step: allocations, autotuning
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return first, (time.perf_counter() - start) / steps


def host_peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


# --- workers (one process per side and case) --------------------------------------------

def worker_probe(_args):
    import jax

    from bert_jax.train import perf
    device = jax.devices()[0]
    dtype = "float32" if device.platform == "cpu" else "bfloat16"
    peak = (perf.measured_matmul_flops(size=2048, seconds=2.0) if device.platform == "cpu"
            else perf.peak_flops_per_device(device, dtype))
    return {"backend": jax.default_backend(), "device": device.device_kind, "peak": peak,
            "peak_dtype": dtype}


def jax_model_config(args, accelerator):
    from bert_jax.models.presets import preset
    fields = dict(scan_layers=args.scan_layers,
                  # FP8 is bf16 with FP8 matmuls on every backend (`compute_dtype=fp8`)
                  dtype="bfloat16" if accelerator or args.numerics == "fp8" else "float32",
                  fp8=args.numerics == "fp8")
    if args.numerics in ("fast", "fp8"):
        fields.update(attention_impl="fused", attention_probs_dropout_prob=0.0)
    if args.hidden_act == JAX_GELU:
        use_jax_gelu()
    elif args.hidden_act:
        fields.update(hidden_act=args.hidden_act)
    return preset(args.model, **fields)


JAX_GELU = "jax_gelu"  # --hidden_act: BERT's erf GELU as jax.nn.gelu, not exact_gelu


def use_jax_gelu():
    """BERT's "gelu" as `jax.nn.gelu(approximate=False)` in this process (a worker runs
    one variant): the form before `activations.exact_gelu`, to measure that lever on the
    whole step."""
    import jax

    from bert_jax.models import activations
    activations.exact_gelu = lambda x: jax.nn.gelu(x, approximate=False)


def jax_step_parts(args, device, accelerator):
    """bert_jax's train step for one case on `device`: (train, state plan, partitioner,
    host batch, examples in it)."""
    from bert_jax.models.heads import BertForPreTraining
    from bert_jax.pretrain.steps import BertPretraining, dummy_inputs, jit_steps
    from bert_jax.train import sharding
    from bert_jax.train.optim import make_optimizer
    from bert_jax.train.train_state import StatePlan
    config = jax_model_config(args, accelerator)
    rng_impl = "threefry" if args.numerics == "faithful" else "unsafe_rbg"
    partitioner = sharding.Partitioner(sharding.make_mesh({"data": 1}, devices=[device]))
    model = BertForPreTraining(config)
    tx, _ = make_optimizer(learning_rate=1e-4, num_train_steps=1000, warmup_steps=10)
    init_fn = lambda key: model.init(
        key, *dummy_inputs(1, args.seq_len, args.predictions))["params"]
    plan = StatePlan.build(init_fn, tx, partitioner, rng_impl)
    train, _ = jit_steps(BertPretraining(model, partitioner.rules), tx, partitioner,
                         plan.shardings)
    if args.packed:
        batch, examples = packed_batch(config.vocab_size, args.batch, args.seq_len,
                                       args.predictions)
    else:
        batch, examples = random_batch(config.vocab_size, args.batch, args.seq_len,
                                       args.predictions), args.batch
    return train, plan, partitioner, batch, examples


def jax_step(args):
    """bert_jax's train step for one case, ready to run: (step, sync), where step() runs
    one step (compiling on the first call) and sync() waits for it."""
    import jax
    train, plan, partitioner, batch, examples = jax_step_parts(
        args, jax.devices()[0], jax.default_backend() != "cpu")
    state = plan.create(0)
    batch = partitioner.global_batch(batch)
    holder = {"state": state, "loss": None, "examples": examples}

    def step():
        with jax.set_mesh(partitioner.mesh):
            holder["state"], metrics = train(holder["state"], batch)
        holder["loss"] = metrics["loss"]

    step.examples = examples  # sequences per step: more than rows when packed
    return step, lambda: jax.block_until_ready(holder["loss"])


def worker_bert_jax(args):
    import jax
    jax.config.update("jax_enable_compilation_cache", False)  # first step = a cold compile
    step, sync = jax_step(args)
    first, seconds = timed(step, args.steps, sync)
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return {"first_step_s": first, "step_s": seconds, "examples": step.examples,
            "peak_memory_gb": peak / 2 ** 30 if peak else host_peak_gb()}


def worker_torch(args):
    import torch
    import transformers

    from bert_jax.models.presets import preset
    from bert_jax.weights.config_json import to_hf_dict
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    config = preset(args.model)
    model = transformers.BertForPreTraining(
        transformers.BertConfig(**to_hf_dict(config))).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01,
                                  **({"fused": True} if cuda else {}))
    if args.side == "torch_compile":
        model = torch.compile(model)
    batch = random_batch(config.vocab_size, args.batch, args.seq_len, args.predictions)
    labels = np.full((args.batch, args.seq_len), -100, np.int64)
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    tensor = lambda x: torch.tensor(np.asarray(x, np.int64), device=device)
    inputs = dict(input_ids=tensor(batch["input_ids"]),
                  attention_mask=tensor(batch["input_mask"]),
                  token_type_ids=tensor(batch["segment_ids"]), labels=tensor(labels),
                  next_sentence_label=tensor(batch["next_sentence_labels"]))

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    first, seconds = timed(step, args.steps, torch.cuda.synchronize if cuda else lambda: None)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else host_peak_gb()
    return {"first_step_s": first, "step_s": seconds, "examples": args.batch,
            "peak_memory_gb": peak}


WORKERS = {"probe": worker_probe, "bert_jax": worker_bert_jax, "torch_eager": worker_torch,
           "torch_compile": worker_torch}


def run_worker(side, xla_flags: str = "", **options):
    """Runs one side in a fresh process (`xla_flags` added to its XLA_FLAGS); its result
    dict, or None (with the reason printed) when it failed, e.g. out of memory."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", side]
    for key, value in options.items():
        if value is True:
            command.append(f"--{key.replace('_', '-')}")
        elif value not in (None, False):
            command += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    if xla_flags:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    print(f"  {side} failed (exit {done.returncode}):\n{tail}", file=sys.stderr)
    return None


# --- the driver ------------------------------------------------------------------------

def report(backend, device, results):
    """The one JSON line: {"backend", "device", "results": [{"model", "seq_len", "batch",
    "side", "numerics", "packed", "seq_per_s", "samples_per_s", "tokens_per_s", "mfu",
    "first_step_s", "peak_memory_gb"}]}."""
    return json.dumps({"backend": backend, "device": device, "results": results})


def main():
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None,
                        help="comma-separated presets (default: all of the backend's cases)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps after two untimed ones (default 10; 3 on a CPU)")
    parser.add_argument("--sides", default=None,
                        help=f"subset of {','.join(SIDES)} (default: all; CPU: no compile)")
    parser.add_argument("--numerics", choices=("auto", "fast", "faithful", "fp8"),
                        default="auto", help="bert_jax's numerics; auto: fast on "
                        "accelerators, faithful on CPU; fp8: fast with FP8 encoder matmuls")
    parser.add_argument("--packed", action="store_true",
                        help="bert_jax: rows packed from the embedded corpus's lengths")
    parser.add_argument("--hidden_act", default=None,
                        help="bert_jax: another activation (gelu_new: BERT's original tanh; "
                        f"{JAX_GELU}: BERT's erf GELU as jax.nn.gelu)")
    parser.add_argument("--scan_layers", action="store_true", help="bert_jax: nn.scan layers")
    parser.add_argument("--batch", type=int, default=None, help="override every case's batch")
    parser.add_argument("--model", help="one preset (as --models)")
    parser.add_argument("--seq_len", type=int, help="only the cases of this length")
    # Internal: one side of one case, in its own process.
    parser.add_argument("--worker", choices=tuple(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--predictions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.side = args.worker
        print("RESULT " + json.dumps(WORKERS[args.worker](args)), flush=True)
        return

    probe = run_worker("probe")
    if probe is None:
        sys.exit("bench_pretrain: the JAX probe process failed")
    accelerator = probe["backend"] != "cpu"
    cases = [c for c in CASES["accelerator" if accelerator else "cpu"]
             if args.seq_len in (None, c[1])]
    chosen = args.models or args.model
    models = chosen.split(",") if chosen else (
        sorted({c[0] for c in cases}) if accelerator else DEFAULT_CPU_MODELS)
    unknown = sorted(set(models) - {c[0] for c in cases})
    if unknown:
        sys.exit(f"bench_pretrain: no {probe['backend']} case for {unknown}"
                 f"{'' if args.seq_len is None else f' at seq {args.seq_len}'}; known: "
                 f"{sorted({c[0] for c in cases})}")
    sides = args.sides.split(",") if args.sides else (
        list(SIDES) if accelerator else ["bert_jax", "torch_eager"])
    if set(sides) - set(SIDES):
        sys.exit(f"bench_pretrain: unknown side(s) {sorted(set(sides) - set(SIDES))}")
    numerics = args.numerics if args.numerics != "auto" else (
        "fast" if accelerator else "faithful")
    steps = args.steps or (10 if accelerator else 3)

    from bert_jax.models.presets import preset
    from bert_jax.train import perf
    print(f"backend {probe['backend']}, device {probe['device']}, peak "
          f"{probe['peak'] / 1e12:.3g} TFLOP/s {probe['peak_dtype']}"
          f"{' (measured)' if not accelerator else ''}; bert_jax numerics {numerics}"
          f"{', scanned layers' if args.scan_layers else ''}; {steps} timed steps")
    print(f"{'model':<11}{'seq':>5}{'batch':>6} {'side':<14}{'seq/s':>9}{'samples/s':>10}"
          f"{'tokens/s':>10}{'MFU':>7}{'first s':>9}{'peak GB':>9}")
    results, ratios = [], []
    for model, seq_len, batch, predictions in cases:
        if model not in models:
            continue
        batch = args.batch or batch
        flops = batch * perf.train_flops_per_example(preset(model), seq_len, predictions)
        by_side = {}
        for side in sides:
            ours = side == "bert_jax"
            out = run_worker(side, model=model, seq_len=seq_len, batch=batch,
                             predictions=predictions, steps=steps, numerics=numerics,
                             scan_layers=args.scan_layers and ours, packed=args.packed and ours,
                             hidden_act=args.hidden_act if ours else None)
            if out is None:
                continue
            row = {"model": model, "seq_len": seq_len, "batch": batch, "side": side,
                   "numerics": numerics if ours else
                   "torch bf16 autocast" if accelerator else "torch float32",
                   "packed": bool(args.packed and ours),
                   "seq_per_s": batch / out["step_s"],
                   "samples_per_s": out["examples"] / out["step_s"],
                   "tokens_per_s": batch * seq_len / out["step_s"],
                   "mfu": flops / out["step_s"] / probe["peak"],
                   "first_step_s": out["first_step_s"], "peak_memory_gb": out["peak_memory_gb"]}
            by_side[side] = row
            results.append(row)
            print(f"{model:<11}{seq_len:>5}{batch:>6} {side:<14}{row['seq_per_s']:>9.1f}"
                  f"{row['samples_per_s']:>10.1f}{row['tokens_per_s']:>10.0f}{row['mfu']:>7.1%}"
                  f"{row['first_step_s']:>9.1f}{row['peak_memory_gb']:>9.2f}", flush=True)
        for other in ("torch_eager", "torch_compile"):
            if "bert_jax" in by_side and other in by_side:
                ratio = by_side["bert_jax"]["seq_per_s"] / by_side[other]["seq_per_s"]
                ratios.append(f"{model} seq {seq_len}: bert_jax / {other} seq/s {ratio:.2f}x")
    print("\n".join(ratios))
    print(report(probe["backend"], probe["device"], results))


if __name__ == "__main__":
    main()
