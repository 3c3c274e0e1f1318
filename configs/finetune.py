"""Fine-tuning recipes: `bert-jax finetune --config finetune.py:TASK --init_from CKPT`.

TASK is a GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli ax), `csv` (your
CSV/TSV/JSONL files), `spam` (the small spam set shipped with the package), `conll`
(CoNLL column files), `conll2003` (tfds), `squad`, `squad_v2` or `multiple_choice`
(your CSV/TSV/JSONL files, SWAG's layout by default). Append `,tiny`
(e.g. `spam,tiny`) for a randomly initialised `tiny` model, one short epoch and no
`--init_from`: what tests and the demo use.

Defaults are BERT's fine-tuning recipe: AdamW (weight decay 0.01), 10% linear
warmup then linear decay, batch 32, lr 5e-5 (1e-4 for tagging; 3e-5 for SQuAD; 2e-5
and batch 16 for multiple choice, as BERT's SWAG run), 3 epochs (2 for SQuAD),
dropout 0.1, evaluation after every epoch, best kept. The learning rates were chosen
on measured evidence: docs/finetuning.md, "How the defaults were chosen".
Any key can be overridden: `--config.learning_rate=3e-5 --config.seeds=1,2,3`.
BERT's GLUE protocol (the paper's grid, selected on dev): `--config.sweep.learning_rate=
2e-5,3e-5,4e-5,5e-5` with batch 32 and 3 epochs, optionally with `--config.seeds`.
"""

import ml_collections

from bert_jax.axis_rules import DEFAULT_LOGICAL_AXIS_RULES

GLUE = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli", "ax")
SQUAD = ("squad", "squad_v2")
TAGGING = ("conll", "conll2003")


def get_config(variant: str | None = None) -> ml_collections.ConfigDict:
    task, _, size = (variant or "sst2").partition(",")
    c = ml_collections.ConfigDict()
    c.task = task

    # Model. `init_from`: a model directory (`bert-jax convert`), a Hub model by name
    # (`hf:ORG/NAME[@REVISION]`, docs/converting.md) or a pretraining workdir, whose
    # encoder is restored; the head is always fresh. `model`: "" = the checkpoint's
    # architecture; a preset name ("tiny", "bert-base", ...) or a dict of BertConfig
    # fields is checked against the checkpoint, or builds a random model without one.
    c.init_from = ""
    c.model = ""
    c.tokenizer = ""                  # "" = the checkpoint's (or the bundled 8k vocab)
    c.hidden_dropout_prob = 0.1
    c.attention_probs_dropout_prob = 0.1
    # Numerics: "" keeps the checkpoint's (float32 for a random model). On TPU/GPU,
    # compute_dtype=bfloat16 computes in bf16 with float32 parameters; remat_policy=full
    # (or dots) trades compute for activation memory at long max_seq_length.
    c.compute_dtype = ""
    c.remat_policy = ""
    # Fast paths (docs/performance.md): attention_impl=fused (needs
    # attention_probs_dropout_prob=0) and rng_impl=rbg or unsafe_rbg for the dropout masks.
    c.attention_impl = "einsum"
    c.rng_impl = "threefry"

    # Data: files for csv/conll/squad (optional for squad: tfds otherwise).
    c.train_file = ""
    c.validation_file = ""
    c.test_file = ""
    c.text_column = "text"
    c.text_pair_column = ""           # "" = single texts
    c.label_column = "label"
    c.label_type = "auto"             # auto | classification | regression
    c.columns = ""                    # csv: a headerless file's columns, e.g. "label,text"
    c.metric = ""                     # csv: "" = accuracy or regression (pearson/spearman/mse)
    c.tag_column = -1                 # conll: the column holding the tag
    c.crf = False                     # tagging: a linear-chain CRF over the words
    c.tag_scheme = "auto"             # conll: IOB2 (BIO), IOB1, IOBES, BILOU, BMES, none or auto
    c.label_prior_bias = True         # tagging: classifier bias starts at log label frequencies
    c.tagging_stride = None           # tagging: windows' overlap (tokens); None = max_seq_length//4
    # multiple_choice: row i of an example is [CLS] context [SEP] question + " " + ending_i
    # [SEP]; label = the index of the right ending. SWAG's columns by default.
    # ending_columns: one column per ending, or one column holding a list (JSONL).
    c.context_column = "sent1"
    c.question_column = "sent2"       # "" = none (the endings alone)
    c.ending_columns = "ending0,ending1,ending2,ending3"
    # GLUE from the published folders (google-research/bert's `--data_dir=$GLUE_DIR/MRPC`):
    # the glue_data folder or the task's own; "" = tensorflow-datasets.
    c.glue_dir = ""
    c.tfds_data_dir = ""
    c.tfds_download = False           # True: let tfds download (needs network)
    c.max_train_examples = 0          # > 0: a random subset (quick runs)
    c.max_eval_examples = 0

    # SQuAD.
    c.doc_stride = 128
    c.max_query_length = 64
    c.n_best_size = 20
    c.max_answer_length = 30
    c.null_score_diff_threshold = 0.0
    # EM/F1 over words ("squad"), or over characters as CMRC 2018 scores Chinese answers
    # ("cmrc"); "auto": cmrc when a gold answer has Chinese characters.
    c.answer_metric = "auto"

    # Batching. packing: several short examples per row (training only);
    # length_bucketing: pad each batch only to the bucket that fits it.
    c.max_seq_length = 384 if task in SQUAD else 128
    # classification: a longer text keeps its start ("head", BERT) or a quarter of its
    # budget from the start and the rest from the end ("head+tail", Sun et al. 2019).
    c.truncation = "head"
    # classification: the vector the classifier reads, "pooler" (BERT's tanh layer on
    # [CLS]) or "mean" (the average of the last hidden states: what sentence-transformers
    # models such as all-MiniLM-L6-v2 were trained to produce).
    c.pooling = "pooler"
    c.packing = False
    c.max_examples_per_row = 8
    c.length_bucketing = False

    # Optimisation.
    c.global_batch_size = 32
    # > 1: each batch as this many sequential micro-batches, summed inside the step: the
    # update of the whole batch in the memory of one micro-batch.
    c.grad_accum_steps = 1
    c.eval_batch_size = 64
    # Measured (docs/finetuning.md, "How the defaults were chosen"): 2e-5, the bottom of
    # the paper's grid, underfits the few hundred steps of a small set; 5e-5, its top,
    # suits classifiers; for tagging 1e-4 beat it by 10-16 points of token accuracy.
    c.learning_rate = 3e-5 if task in SQUAD else 1e-4 if task in TAGGING else 5e-5
    c.num_train_epochs = 2.0 if task in SQUAD else 3.0
    c.warmup_proportion = 0.1
    c.optimizer = "adamw"
    # Staged fine-tuning: parameters matching these comma-separated glob patterns over
    # their paths (e.g. "bert/*": the encoder; "bert/embeddings/*") get no update and no
    # optimizer state for freeze_steps steps or freeze_epochs epochs (neither: the whole
    # run), then train with the rest.
    c.freeze = ""
    c.freeze_steps = 0
    c.freeze_epochs = 0.0
    c.weight_decay = 0.01
    c.max_grad_norm = 1.0
    # A step whose loss or gradient norm is NaN/Inf is skipped with a warning; "stop"
    # stops at the first, and max_consecutive_nonfinite in a row always stop (diverged).
    c.on_nonfinite = "skip"
    c.max_consecutive_nonfinite = 5

    # Runs.
    c.seed = 42
    # The model kept in WORKDIR/best and tested: "best" validation score (ties keep the
    # earlier epoch) or "last", the end of the schedule (BERT's protocol).
    c.keep_checkpoint = "best"
    c.seeds = ""                      # e.g. "1,2,3": one run per seed, mean +- std
    # BERT's selection protocol: lists ("2e-5,3e-5,5e-5") of these keys make one run per
    # combination, each replacing the key's value, selected on validation
    # (bert_jax.finetune.selection). "" = the key's value, one run.
    c.sweep = ml_collections.ConfigDict(dict(learning_rate="", num_train_epochs="",
                                             global_batch_size=""))
    c.mesh_shape = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    # Multi-slice TPU: mesh_shape is then per slice, and each axis is also split this many
    # ways across slices (docs/tpu.md).
    c.dcn_mesh_shape = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    c.logical_axis_rules = DEFAULT_LOGICAL_AXIS_RULES
    c.log_every_steps = 50
    # Training checkpoints (WORKDIR/checkpoints) at every epoch's end and every this many
    # steps (0: epoch ends only): an interrupted run rerun with the same command resumes
    # from the last one, exactly. Removed when the run completes.
    c.checkpoint_every_steps = 500

    # Distillation (`bert-jax distill`, docs/distillation.md; unused by a plain fine-tune):
    # loss = alpha * task loss + (1 - alpha) * T^2 * KL(teacher/T || student/T)
    #        + hidden_weight * hidden-state MSE + attention_weight * attention MSE.
    c.teacher = ""                    # set by `bert-jax distill --teacher`
    c.temperature = 2.0
    c.alpha = 0.5
    c.student_layers = 0              # keep N evenly spaced student layers (0: all)
    c.hidden_weight = 0.0             # TinyBERT-style hidden-state matching
    c.attention_weight = 0.0          # attention-probability matching

    if task == "multiple_choice":
        c.global_batch_size = 16      # BERT's SWAG recipe; each example is C rows
        c.learning_rate = 2e-5
        c.eval_batch_size = 16
    if task == "spam":
        c.num_train_epochs = 2.0
    if size == "tiny":
        c.model = "tiny"
        c.max_seq_length = 128 if task in SQUAD else 64
        c.global_batch_size = 16
        c.learning_rate = 1e-3
        c.num_train_epochs = 1.0
        c.log_every_steps = 10
    elif size:
        raise ValueError(f"unknown size {size!r} in {variant!r}; only ',tiny' is known")
    return c
