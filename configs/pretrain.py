"""Pretraining recipes (MLM + NSP): `bert-jax pretrain --config configs/pretrain.py:VARIANT`.
`--config.next_sentence_prediction=False` trains MLM only on rows of contiguous
sentences (RoBERTa's FULL-SENTENCES; docs/pretraining.md); `--config.teacher=DIR` distils
a pretrained teacher's MLM logits into the model (DistilBERT; docs/distillation.md).

Variants (BERT's exact numerics: einsum attention with dropout, threefry):
  tiny   the `tiny` preset (2 layers, H=128): tests, the demo, a CPU in minutes
  small  BERT-Small (4 layers, H=512)
  base   BERT-base as in Devlin et al.: batch 256, seq 128, 1M steps, lr 1e-4
  large  BERT-large with LAMB at batch 4096 (You et al. 2019), FSDP, remat

Fast variants for accelerators (bf16, fused attention without attention-probability
dropout, the unsafe_rbg dropout RNG; docs/performance.md, figures in docs/results.md):
  gpu_base       BERT-base, seq 128, batch 256 per 80 GB GPU
  gpu_large      BERT-large, seq 128, batch 128 per 80 GB GPU
  gpu_large_512  BERT-large, seq 512, batch 32 per 80 GB GPU, 80 predictions per row
  tpu_base       `base` with the fast numerics (data parallel; 7.0 GiB per v5e chip at
                 128 rows per chip)
  tpu_large      `large` with the fast numerics (FSDP; 4.4 GiB per chip on a v4-128)
The ModernBERT recipe (Warner et al. 2024; docs/pretraining.md): MLM only with 30% masking on
packed rows, the modern encoder (rotary, pre-norm, GeGLU, no biases, alternating 128-token
windows and global layers), a warmup-stable-decay schedule:
  modernbert_base  the `modernbert-base` preset at seq 1024, bf16, fused attention
  modernbert_tiny  the `modernbert-tiny` preset at seq 256: a CPU in minutes
ELECTRA (Clark et al. 2020; docs/pretraining.md): replaced-token detection, a discriminator
trained against a jointly trained generator (`objective='electra'`), the published sizes,
learning rates, batches and step counts (the paper's Table 6):
  electra_small  H=256, E=128, 12 layers, 4 heads, generator 1/4, seq 128, batch 128, 1M steps
  electra_base   H=768, 12 layers, 12 heads, generator 1/3, seq 512, batch 256, 766k steps
  electra_large  H=1024, 24 layers, 16 heads, generator 1/4, 25% masking, seq 512, batch 2048,
                 400k steps, FSDP and remat (check a slice with `bert-jax compile`)
Add `,tiny` (e.g. `electra_small,tiny`) for the same objective at the size of `tiny`.
The gpu_* global_batch_size is for one GPU: multiply it by the number of GPUs. The tpu_*
ones are global; check a slice with `bert-jax compile --topology v4-128` (docs/tpu.md).
Add `,faithful` (e.g. `gpu_large,faithful`) for BERT's exact numerics at the same shapes.

Any key can be overridden: `--config.num_train_steps=100 --config.mesh_shape.fsdp=8`.
Every key, its default, range and description (bert_jax/train/run_config.py):
`bert-jax pretrain --help_config`.
"""

import ml_collections

from bert_jax.train.run_config import PRETRAIN, base_config


def get_config(variant: str | None = None) -> ml_collections.ConfigDict:
    c = base_config(PRETRAIN)  # every key at its default: `bert-jax pretrain --help_config`
    variant, _, modifier = (variant or "base").partition(",")
    if modifier not in ("", "faithful", "tiny"):
        raise ValueError(f"unknown variant modifier {modifier!r}: 'faithful' or 'tiny'")
    if modifier == "tiny" and not variant.startswith("electra_"):
        raise ValueError("the 'tiny' modifier is for the electra_* variants; use `tiny`")
    if variant.startswith(("gpu_", "tpu_")):
        _fast_numerics(c)
    if variant in ("base", "tpu_base"):
        pass
    elif variant in ("modernbert_base", "modernbert_tiny"):
        _modernbert(c, variant)
    elif variant in ("electra_small", "electra_base", "electra_large"):
        _electra(c, variant, tiny=modifier == "tiny")
    elif variant == "tiny":
        c.model = "tiny"
        c.global_batch_size = 32
        _cpu_run(c)
        c.learning_rate = 1e-3
    elif variant == "small":
        c.model = "bert-L4-H512"
        c.num_train_steps = 500_000
        c.learning_rate = 5e-4
    elif variant in ("large", "tpu_large"):
        c.model = "bert-large"
        c.optimizer = "lamb"
        c.global_batch_size = 4096
        c.num_train_steps = 62_500
        c.warmup_steps = 6_250
        c.learning_rate = 1.77e-3      # You et al. (2019), Table 4: 5 / (2^1.5 * 10^3)
        c.compute_dtype = "bfloat16"
        c.remat_policy = "dots_with_no_batch_dims"
        c.scan_layers = True
        c.mesh_shape.data = 1
        c.mesh_shape.fsdp = -1
        c.eval_every_steps = 2_500
        c.checkpoint_every_steps = 2_500
    elif variant == "gpu_base":
        c.global_batch_size = 256
    elif variant in ("gpu_large", "gpu_large_512"):
        c.model = "bert-large"
        c.global_batch_size = 128
        if variant == "gpu_large_512":
            c.max_seq_length = 512
            c.max_predictions_per_seq = 80
            c.global_batch_size = 32
    else:
        raise ValueError(f"unknown variant {variant!r}: tiny, small, base, large, gpu_base, "
                         "gpu_large, gpu_large_512, tpu_base, tpu_large, modernbert_base, "
                         "modernbert_tiny, electra_small, electra_base or electra_large")
    if modifier == "faithful":
        c.attention_impl = "einsum"
        c.attention_probs_dropout_prob = None
        c.rng_impl = "threefry"
    return c


def _modernbert(c: ml_collections.ConfigDict, variant: str) -> None:
    """ModernBERT's published pretraining, as far as bert_jax has it: 30% masking, no NSP,
    packed rows, lr 8e-4 (base) with a warmup-stable-decay trapezoid, weight decay 1e-5,
    no dropout. Approximated: StableAdamW is AdamW with global-norm clipping here (no
    per-tensor update clipping); its batch-size warmup and sequence-length schedule (1024
    then 8192 tokens) are one fixed length (raise --config.max_seq_length for the context
    extension); its warmup of 3B tokens and 1.7T-token run are steps at this batch."""
    c.next_sentence_prediction = False
    c.masked_lm_prob = 0.3
    c.packing = True
    c.lr_schedule = "wsd"
    c.weight_decay = 1e-5
    c.optimizer = "adamw"
    if variant == "modernbert_base":
        c.model = "modernbert-base"
        c.max_seq_length = 1024
        c.max_predictions_per_seq = 320   # 30% of 1024, rounded up
        c.global_batch_size = 4608        # ModernBERT's final batch (4.7M tokens / 1024)
        # Micro-batches of 64 rows: a v5p-8 fits a step at seq 8192 (52 GiB per chip,
        # `bert-jax compile`); lower it on larger slices.
        c.grad_accum_steps = 72
        c.num_train_steps = 360_000
        c.warmup_steps = 640              # ~3B tokens at this batch
        c.learning_rate = 8e-4
        c.compute_dtype = "bfloat16"
        c.attention_impl = "fused"
        c.attention_probs_dropout_prob = 0.0
        c.rng_impl = "unsafe_rbg"
        c.scan_layers = True
        c.remat_policy = "dots_with_no_batch_dims"
        c.mesh_shape.data = 1
        c.mesh_shape.fsdp = -1
        c.eval_every_steps = 5_000
        c.checkpoint_every_steps = 5_000
    else:
        c.model = "modernbert-tiny"
        c.max_seq_length = 256
        c.max_predictions_per_seq = 80
        c.global_batch_size = 16
        _cpu_run(c)
        c.learning_rate = 2e-3


def _cpu_run(c: ml_collections.ConfigDict) -> None:
    """The schedule of the CPU-sized variants (tests, the demo, minutes on a CPU)."""
    c.num_train_steps = 3000
    c.warmup_steps = 300
    c.log_every_steps = 50
    c.eval_every_steps = 500
    c.eval_steps = 20
    c.checkpoint_every_steps = 500


def _electra(c: ml_collections.ConfigDict, variant: str, tiny: bool) -> None:
    """ELECTRA's published pretraining (google-research/electra's configure_pretraining.py
    and the paper's Table 6): no NSP, dynamic masking (15%; 25% for large), masked
    positions int((p + 0.005) * seq) as there, 10k warmup steps then linear decay, AdamW
    with weight decay 0.01, loss = MLM + 50 * discriminator. `tiny`: the same objective on
    the `tiny` preset's shape with E=64, for tests and a CPU."""
    c.objective = "electra"
    c.next_sentence_prediction = False
    c.disc_weight = 50.0
    c.warmup_steps = 10_000
    c.weight_decay = 0.01
    size = variant.removeprefix("electra_")
    hidden, embedding, layers, heads = {"small": (256, 128, 12, 4), "base": (768, 768, 12, 12),
                                        "large": (1024, 1024, 24, 16)}[size]
    c.generator_size = 1 / 3 if size == "base" else 0.25
    c.masked_lm_prob = 0.25 if size == "large" else 0.15
    c.max_seq_length = 128 if size == "small" else 512
    c.learning_rate = 5e-4 if size == "small" else 2e-4
    c.global_batch_size, c.num_train_steps = {"small": (128, 1_000_000), "base": (256, 766_000),
                                              "large": (2048, 400_000)}[size]
    if size == "large":
        c.compute_dtype = "bfloat16"
        c.remat_policy = "dots_with_no_batch_dims"
        c.scan_layers = True
        c.mesh_shape.data = 1
        c.mesh_shape.fsdp = -1
    if tiny:
        hidden, embedding, layers, heads = 128, 64, 2, 2
        c.max_seq_length = 128
        c.global_batch_size = 32
        _cpu_run(c)
        c.learning_rate = 1e-3
    c.max_predictions_per_seq = int((c.masked_lm_prob + 0.005) * c.max_seq_length)
    model = dict(preset="tiny" if tiny else "bert-base", model_type="electra",
                 pooler_act="gelu", hidden_size=hidden, num_hidden_layers=layers,
                 num_attention_heads=heads, intermediate_size=4 * hidden)
    if embedding != hidden:  # factorized: embeddings of width E, projected
        model["embedding_size"] = embedding
    with c.ignore_type():  # the model as fields (a preset's name is a str)
        c.model = ml_collections.ConfigDict(model)


def _fast_numerics(c: ml_collections.ConfigDict) -> None:
    """bf16 compute, fused attention (hence no attention-probability dropout) and the
    unsafe_rbg dropout RNG."""
    c.compute_dtype = "bfloat16"
    c.attention_impl = "fused"
    c.attention_probs_dropout_prob = 0.0
    c.rng_impl = "unsafe_rbg"
