"""The run configs' schemas.

Each key of the pretraining and the fine-tuning config declared once, with its default, type,
allowed values or range, a one-line description and whether a resumed run may change it
(`checkpoint.CHANGEABLE_KEYS` is derived from it).

The recipes in configs/*.py start from `base_config(PRETRAIN)` / `base_config(FINETUNE)`
and only set values. Every run config a job gets comes from one constructor,
`config_loader.build_config` (a config file's, a fine-tuned model's saved one, a
distillation's), which reads old configs in today's terms (RENAMED_KEYS, ADDED_KEYS) and
checks the result against its schema once (`seal`: unknown keys, wrong types and values
out of range are refused in one line naming the key); the jobs then only assert that
(`require_built`). `bert-jax pretrain --help_config` prints a schema (`describe`).
Imports no jax: loading a config stays cheap.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from typing import Any

import ml_collections

from bert_jax.errors import UserError
from bert_jax.models.config import ATTENTION_IMPLS, REMAT_POLICIES
from bert_jax.train.axis_rules import DEFAULT_LOGICAL_AXIS_RULES, MESH_AXES
from bert_jax.train.model_config import COMPUTE_DTYPES

OPTIMIZERS = ("adamw", "lamb")
RNG_IMPLS = ("threefry", "rbg", "unsafe_rbg")
ON_NONFINITE = ("skip", "stop")
# The shortest training row: a sentence pair [CLS] A [SEP] B [SEP] with room for text.
MIN_TRAINING_SEQ_LENGTH = 8
# The keys a fine-tuning sweep lists values of (`sweep.KEY`, `finetune.selection`), each
# with the short name that a setting's directory carries (lr2e-05_ep3).
SWEEP_KEYS = {"learning_rate": "lr", "num_train_epochs": "ep", "global_batch_size": "bs"}
# Keys renamed so that every config names a setting alike (old -> new). A config file, an
# override or a saved config that still uses the old name sets the new key
# (`config_loader.build_config`; the first two with one warning line).
RENAMED_KEYS = {"dtype": "compute_dtype", "init": "init_from", "pack": "packing",
                "learning_rates": "sweep.learning_rate"}
# Keys added after configs were first saved (with checkpoints and fine-tuned models), with
# the value the runs that saved them had: a saved config without one reads as having it.
ADDED_KEYS = {"next_sentence_prediction": True, "teacher": "", "temperature": 2.0,
              "alpha": 0.5, "dupe_factor": 5, "objective": "mlm",
              "generator_size": 0.25, "disc_weight": 50.0, "hidden_weight": 0.0,
              "attention_weight": 0.0,
              # runs before input_pipeline existed read through tf.data
              "input_pipeline": "tf.data"}
# Keys whose default changed since runs were saved: a resumed run that leaves one at its default
# takes the saved run's value (its command, rerun, resumes as it began).
FOLLOW_THE_SAVED_RUN = ("input_pipeline",)


@dataclasses.dataclass(frozen=True)
class Key:
    """One config key.

    `kind`: its type (float also takes an int; dict: a ConfigDict of `fields`); `also`: values
    allowed beyond the type and range (None, "auto"); `choices`: the allowed values; `low`/`high`:
    the inclusive range; `above`: an exclusive lower bound (a temperature, an epoch count > 0);
    `resume`: a resumed run may change it (else the checkpoint refuses the change)."""
    name: str
    default: Any
    help: str
    kind: type | tuple = None
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    above: float | None = None
    also: tuple = ()
    resume: bool = False
    fields: tuple = ()
    group: str = ""

    @property
    def types(self) -> tuple:
        kind = self.kind if self.kind is not None else type(self.default)
        kind = kind if isinstance(kind, tuple) else (kind,)
        return kind + ((int,) if float in kind else ())

    def type_name(self) -> str:
        return " | ".join(t.__name__ for t in self.types if not (t is int and float in self.types))


def _group(name: str, *keys: Key) -> list[Key]:
    return [dataclasses.replace(k, group=name) for k in keys]


def _mesh(name: str, help: str) -> Key:
    return Key(name, dict(data=-1, fsdp=1, tensor=1), help, kind=dict, low=-1,
               fields=MESH_AXES, resume=True)


# Keys both jobs have, alike.
_NUMERICS = (
    Key("attention_impl", "einsum", "einsum: BERT's exact attention; fused: faster, no "
        "attention-probability dropout", choices=ATTENTION_IMPLS, resume=True),
    Key("rng_impl", "threefry", "the dropout RNG (unsafe_rbg: fastest; changes the random "
        "stream)", choices=RNG_IMPLS),
)
_NONFINITE = (
    Key("on_nonfinite", "skip", "a NaN/Inf loss or gradient: skip the update (and count "
        "it) or stop", choices=ON_NONFINITE, resume=True),
    Key("max_consecutive_nonfinite", 5, "skipped updates in a row that stop the run "
        "(diverged)", low=1, resume=True),
)
_MESH = (
    _mesh("mesh_shape", "sizes of the data, fsdp and tensor mesh axes (-1: the rest)"),
    _mesh("dcn_mesh_shape", "multi-slice TPU: each axis also split this many ways across "
          "slices (docs/tpu.md)"),
    Key("logical_axis_rules", DEFAULT_LOGICAL_AXIS_RULES, "(logical axis, mesh axes) pairs "
        "placing parameters and activations on the mesh", kind=(tuple, list), resume=True),
)

PRETRAIN: list[Key] = [
    *_group(
        "model",
        Key("model", "bert-base", "a preset name (bert_jax.models.presets.PRESETS) or a dict of "
            "BertConfig fields, optionally with 'preset' naming the base; '' = init_from's "
            "architecture (RoBERTa, DistilBERT, ... further pretrained)", kind=(str, dict)),
        Key("compute_dtype", "float32", "bfloat16: bf16 compute, fp32 params and optimizer; "
            "fp8: bf16 with FP8 encoder matmuls (Hopper)", choices=COMPUTE_DTYPES, resume=True),
        Key("remat_policy", "none", "recompute activations in the backward pass to save "
            "memory", choices=REMAT_POLICIES, resume=True),
        Key("scan_layers", False, "the encoder layers as one scanned layer (faster compiles)"),
        _NUMERICS[0],
        Key("attention_probs_dropout_prob", None, "None: the model's (0.1); fused attention "
            "needs 0.0", kind=float, low=0.0, high=1.0, also=(None,), resume=True),
        _NUMERICS[1]),
    *_group(
        "data",
        Key("input_files", "", "comma-separated globs of TFRecords (bert-jax create-data) or "
            "raw text, or tfds:NAME[/CONFIG][:SPLIT] corpora; '' = the embedded "
            "public-domain corpus"),
        Key("eval_fraction", 0.01, "share of examples held out for evaluation", low=0.0,
            high=1.0),
        Key("input_pipeline", "grain", "grain: ArrayRecord or TFRecord shards, a global "
            "shuffle, no TensorFlow; tf.data: TFRecord shards (pip install 'bert_jax[tf]')",
            choices=("grain", "tf.data")),  # data.options.INPUT_PIPELINES: no data import here
        Key("input_workers", 0, "grain: processes that read, parse and mask the input, beside "
            "training (0: threads in the training process; input-bound: the spare cores)",
            low=0, resume=True),
        Key("input_threads", 0, "grain: threads per reading process (0: 1 for local files, 8 "
            "for a bucket's)", low=0, resume=True),
        Key("tokenizer", "", "a tokenizer directory or vocab file; '' = the bundled 8k "
            "WordPiece vocabulary"),
        Key("max_seq_length", 128, "tokens per row", low=MIN_TRAINING_SEQ_LENGTH),
        Key("max_predictions_per_seq", 20, "masked positions per row at most", low=1),
        Key("masked_lm_prob", 0.15, "share of tokens masked (ModernBERT: 0.3)", above=0.0,
            low=0.0, high=1.0),
        Key("dynamic_masking", True, "mask anew each epoch (RoBERTa) instead of once"),
        Key("dupe_factor", 5, "raw-text input_files: rows made from each document this many "
            "times, each split and masked differently (BERT's 5)", low=1),
        Key("whole_word_masking", False, "mask all WordPieces of a word together"),
        Key("packing", False, "several documents per row (MLM only)"),
        Key("next_sentence_prediction", True, "False: MLM only on rows of contiguous "
            "sentences (RoBERTa's FULL-SENTENCES)"),
        Key("sentence_order_prediction", False, "ALBERT's sentence-order prediction instead "
            "of NSP"),
        Key("knowledge_masking", "none", "ERNIE's masking of Chinese entities or phrases "
            "whole", choices=("none", "entity", "phrase")),
        Key("knowledge_masking_prob", 1.0, "share of rows masked by knowledge units", low=0.0,
            high=1.0)),
    *_group(
        "objective (ELECTRA: docs/pretraining.md)",
        Key("objective", "mlm", "mlm: BERT's masked LM (+NSP); electra: replaced-token "
            "detection by a discriminator against a jointly trained generator",
            choices=("mlm", "electra")),
        Key("generator_size", 0.25, "ELECTRA's generator: this fraction of the "
            "discriminator's hidden size, FFN size and heads (same depth)", above=0.0,
            high=1.0),
        Key("disc_weight", 50.0, "ELECTRA's loss = generator MLM + disc_weight * "
            "discriminator loss", low=0.0)),
    *_group(
        "distillation (DistilBERT, TinyBERT: docs/distillation.md)",
        Key("teacher", "", "a pretrained model dir or workdir with an MLM head; '' = no "
            "distillation"),
        Key("temperature", 2.0, "softmax temperature T of the KL term", above=0.0,
            resume=True),
        Key("alpha", 0.5, "loss = alpha * MLM + (1 - alpha) * T^2 * KL + ...", low=0.0,
            high=1.0, resume=True),
        Key("hidden_weight", 0.0, "TinyBERT's general distillation: weight of the "
            "layer-by-layer hidden-state MSE (a learned projection across widths)", low=0.0),
        Key("attention_weight", 0.0, "weight of the attention-map MSE (equal head counts)",
            low=0.0)),
    *_group(
        "optimisation",
        Key("global_batch_size", 256, "examples per optimizer update", low=1, resume=True),
        Key("grad_accum_steps", 1, "sequential micro-batches per update", low=1, resume=True),
        Key("num_train_steps", 1_000_000, "optimizer updates", low=1, resume=True),
        Key("warmup_steps", 10_000, "linear warmup steps", low=0, resume=True),
        Key("learning_rate", 1e-4, "peak learning rate (> 0; 0 only with "
            "allow_zero_learning_rate)", resume=True),
        Key("allow_zero_learning_rate", False, "learning_rate 0 trains nothing: only on "
            "purpose", resume=True),
        Key("optimizer", "adamw", "adamw, or lamb for large batches", choices=OPTIMIZERS),
        Key("lr_schedule", "bert", "bert: warmup then linear decay; wsd: warmup-stable-decay",
            choices=("bert", "wsd")),
        Key("weight_decay", 0.01, "decoupled weight decay", low=0.0, resume=True),
        Key("max_grad_norm", 1.0, "global gradient-norm clipping (0: none)", low=0.0,
            resume=True),
        *_NONFINITE),
    *_group("devices", *_MESH),
    *_group(
        "bookkeeping",
        Key("seed", 0, "parameter initialisation, data order and dropout"),
        Key("log_every_steps", 100, "steps between metric lines", low=1, resume=True),
        Key("eval_every_steps", 10_000, "steps between evaluations (0: none)", low=0,
            resume=True),
        Key("eval_steps", 50, "batches per evaluation", low=1, resume=True),
        Key("checkpoint_every_steps", 10_000, "steps between checkpoints", low=1, resume=True),
        Key("keep_checkpoints", 3, "checkpoints kept", low=1, resume=True),
        Key("resume_from", "", "a checkpoint dir to start from if the workdir has none",
            resume=True),
        Key("init_from", "", "a model dir (bert-jax convert / pretrain) or hf:ORG/NAME",
            resume=True),
        Key("partial_restore", False, "allow missing/extra params when restoring init_from",
            resume=True),
        Key("start_fresh", False, "start over when no checkpoint in the workdir is readable",
            resume=True)),
]

FINETUNE: list[Key] = [
    *_group(
        "model",
        Key("task", "sst2", "a GLUE task, csv, spam, conll, conll2003, squad, squad_v2 or "
            "multiple_choice"),
        Key("init_from", "", "a model dir, hf:ORG/NAME or a pretraining workdir; its encoder "
            "is restored", resume=True),
        Key("model", "", "'' = the checkpoint's architecture; a preset or a dict of BertConfig "
            "fields", kind=(str, dict)),
        Key("tokenizer", "", "'' = the checkpoint's (or the bundled 8k vocabulary)"),
        Key("hidden_dropout_prob", 0.1, "dropout on hidden states", low=0.0, high=1.0,
            resume=True),
        Key("attention_probs_dropout_prob", 0.1, "dropout on attention probabilities (fused "
            "attention needs 0)", low=0.0, high=1.0, resume=True),
        Key("compute_dtype", "", "'' = the checkpoint's (float32 for a random model)",
            choices=("", *COMPUTE_DTYPES), resume=True),
        Key("remat_policy", "", "'' = the checkpoint's; full or dots save activation memory",
            choices=("", *REMAT_POLICIES), resume=True),
        *_NUMERICS),
    *_group(
        "data",
        Key("train_file", "", "csv/conll/squad/multiple_choice: the training file"),
        Key("validation_file", "", "the validation file"),
        Key("test_file", "", "the test file (predictions written)"),
        Key("text_column", "text", "csv: the text column"),
        Key("text_pair_column", "", "csv: the second text's column ('' = single texts)"),
        Key("label_column", "label", "the label column"),
        Key("label_type", "auto", "csv: what the labels are",
            choices=("auto", "classification", "regression")),
        Key("columns", "", "csv: a headerless file's columns, e.g. 'label,text'"),
        Key("metric", "", "csv: '' = accuracy or regression (pearson/spearman/mse)"),
        Key("tag_column", -1, "conll: the column holding the tag"),
        Key("crf", False, "tagging: a linear-chain CRF over the words"),
        Key("tag_scheme", "auto", "conll: IOB2 (BIO), IOB1, IOBES, BILOU, BMES, none or auto"),
        Key("label_prior_bias", True, "tagging: classifier bias starts at log label "
            "frequencies"),
        Key("tagging_stride", None, "tagging: windows' overlap in tokens; None = "
            "max_seq_length // 4", kind=int, low=1, also=(None,)),
        Key("context_column", "sent1", "multiple_choice: the context column"),
        Key("question_column", "sent2", "multiple_choice: the question column ('' = none)"),
        Key("ending_columns", "ending0,ending1,ending2,ending3", "multiple_choice: one column "
            "per ending, or one holding a list"),
        Key("glue_dir", "", "GLUE from the published folders; '' = tensorflow-datasets"),
        Key("tfds_data_dir", "", "tensorflow-datasets' data dir ('' = its default)"),
        Key("tfds_download", False, "let tfds download (needs network)"),
        Key("max_train_examples", 0, "> 0: a random subset of the training set", low=0),
        Key("max_eval_examples", 0, "> 0: a random subset of the evaluation set", low=0)),
    *_group(
        "squad",
        Key("doc_stride", 128, "tokens between a long context's windows", low=1),
        Key("max_query_length", 64, "question tokens kept", low=1),
        Key("n_best_size", 20, "candidate answers per question", low=1),
        Key("max_answer_length", 30, "answer tokens at most", low=1),
        Key("null_score_diff_threshold", 0.0, "squad_v2: answer 'none' above this margin"),
        Key("answer_metric", "auto", "EM/F1 over words (squad) or characters (cmrc); auto: "
            "cmrc for Chinese answers", choices=("auto", "squad", "cmrc"))),
    *_group(
        "batching",
        Key("max_seq_length", 128, "tokens per row (384 for SQuAD); 'auto': from the data",
            low=MIN_TRAINING_SEQ_LENGTH, also=("auto",)),
        Key("truncation", "head", "classification: keep the head, or head+tail (Sun et al.)",
            choices=("head", "head+tail")),
        Key("pooling", "pooler", "classification: the vector read, pooler ([CLS]) or mean",
            choices=("pooler", "mean")),
        Key("packing", False, "several short examples per training row"),
        Key("max_examples_per_row", 8, "packing: examples per row at most", low=1),
        Key("length_bucketing", False, "pad each batch only to the bucket that fits it")),
    *_group(
        "optimisation",
        Key("global_batch_size", 32, "examples per update", low=1, resume=True),
        Key("grad_accum_steps", 1, "sequential micro-batches per update", low=1, resume=True),
        Key("eval_batch_size", 64, "examples per evaluation batch", low=1),
        Key("learning_rate", 5e-5, "peak learning rate (task-specific in the recipes)",
            low=0.0, resume=True),
        Key("num_train_epochs", 3.0, "epochs (2 for SQuAD)", above=0.0),
        Key("warmup_proportion", 0.1, "share of steps in linear warmup", low=0.0, high=1.0),
        Key("optimizer", "adamw", "adamw or lamb", choices=OPTIMIZERS),
        Key("freeze", "", "comma-separated globs of parameter paths that get no update"),
        Key("freeze_steps", 0, "steps the freeze lasts (neither: the whole run)", low=0),
        Key("freeze_epochs", 0.0, "epochs the freeze lasts", low=0.0),
        Key("weight_decay", 0.01, "decoupled weight decay", low=0.0, resume=True),
        Key("max_grad_norm", 1.0, "global gradient-norm clipping (0: none)", low=0.0,
            resume=True),
        *_NONFINITE),
    *_group(
        "runs",
        Key("seed", 42, "initialisation, data order and dropout"),
        Key("keep_checkpoint", "best", "the model kept: best validation score or last",
            choices=("best", "last")),
        Key("seeds", "", "e.g. '1,2,3': one run per seed, mean +- std"),
        Key("sweep", dict.fromkeys(SWEEP_KEYS, ""), "lists ('2e-5,3e-5') make one run per "
            "combination, selected on validation", kind=dict, fields=tuple(SWEEP_KEYS)),
        *_MESH,
        Key("log_every_steps", 50, "steps between metric lines", low=1, resume=True),
        Key("checkpoint_every_steps", 500, "steps between training checkpoints (0: epoch "
            "ends only)", low=0, resume=True)),
    *_group(
        "distillation (bert-jax distill, docs/distillation.md)",
        Key("teacher", "", "set by `bert-jax distill --teacher`"),
        Key("temperature", 2.0, "softmax temperature T", above=0.0, resume=True),
        Key("alpha", 0.5, "loss = alpha * task + (1 - alpha) * T^2 * KL + ...", low=0.0,
            high=1.0, resume=True),
        Key("student_layers", 0, "keep N evenly spaced student layers (0: all)", low=0),
        Key("hidden_weight", 0.0, "TinyBERT-style hidden-state MSE weight", low=0.0),
        Key("attention_weight", 0.0, "attention-probability MSE weight", low=0.0)),
]

SCHEMAS = {"pretrain": PRETRAIN, "finetune": FINETUNE}


def _value(default: Any) -> Any:
    """A default as a config value: a dict as a ConfigDict of its own (never shared)."""
    if isinstance(default, ml_collections.ConfigDict):
        default = default.to_dict()
    return ml_collections.ConfigDict(default) if isinstance(default, dict) else default


def base_config(schema: list[Key]) -> ml_collections.ConfigDict:
    """A ConfigDict holding every key of `schema` at its default."""
    c = ml_collections.ConfigDict()
    for key in schema:
        with c.ignore_type():
            c[key.name] = _value(key.default)
    return c


def resume_keys(*schemas: list[Key]) -> frozenset[str]:
    """The keys a resumed run may change."""
    return frozenset(k.name for schema in schemas for k in schema if k.resume)


def fill_defaults(config: ml_collections.ConfigDict, schema: list[Key],
                  defaults: ml_collections.ConfigDict | None = None) -> None:
    """Adds the keys, and the fields of dict keys, that a config lacks.

    They are lacking in a copy made, or a config saved, before they existed: `defaults`' values
    (a recipe's) where it has them, else the schema's."""
    for key in schema:
        default = defaults[key.name] if defaults is not None and key.name in defaults \
            else key.default
        if key.name not in config:
            with config.ignore_type():
                config[key.name] = _value(default)
        elif key.fields and isinstance(config[key.name], ml_collections.ConfigDict):
            node = config[key.name]
            for field in key.fields:
                if field not in node:
                    node[field] = default[field]


def check(config: ml_collections.ConfigDict, schema: list[Key]) -> None:
    """Raises UserError naming the first unknown key, wrong type or value out of range."""
    known = {k.name: k for k in schema}
    for name in config.keys():
        if name not in known:
            near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            raise UserError(f"unknown config key {name!r}"
                            + (f"; did you mean {' or '.join(near)}?" if near else ""))
    for key in schema:
        if key.name in config:
            _check_key(key, key.name, config[key.name])


# A built config's instance attribute (not a key): the command it was built and checked for.
_BUILT_FOR = "_bert_jax_built_for"
_NOT_BUILT = ("a run config must come from bert_jax.train.config_loader (load_config, "
              "build_config): that constructor checks it against its schema, once, and the "
              "jobs rely on it")


def seal(config: ml_collections.ConfigDict, command: str) -> ml_collections.ConfigDict:
    """`config` checked against `command`'s schema (`check`) and marked as built (`built_for`).

    The last step of `config_loader.build_config`, the one constructor of a run config. Later code
    trusts the mark instead of checking again."""
    check(config, SCHEMAS[command])
    object.__setattr__(config, _BUILT_FOR, command)
    return config


def built_for(config: ml_collections.ConfigDict) -> str | None:
    """The command ("pretrain", "finetune") that `config` was built and checked for.

    None for a config made otherwise (by hand; a copy is not marked either: `derive` makes checked
    ones)."""
    return vars(config).get(_BUILT_FOR)


def require_built(config: ml_collections.ConfigDict, command: str) -> None:
    """Raises unless `config` came from the constructor for `command`.

    A config of the other command is the user's mistake (UserError), one made by hand the caller's
    (TypeError)."""
    built = built_for(config)
    if built == command:
        return
    if built:
        raise UserError(f"a `bert-jax {built}` config was given to a step of `bert-jax "
                        f"{command}`: use configs/{command}.py[:VARIANT] or a copy of it")
    raise TypeError(_NOT_BUILT)


def derive(config: ml_collections.ConfigDict, **values: Any) -> ml_collections.ConfigDict:
    """A copy of the built `config` with `values` set, each checked against its key.

    The rest was checked when `config` was built. For a grid's run of one setting
    (`finetune.selection`)."""
    command = built_for(config)
    if command is None:
        raise TypeError(_NOT_BUILT)
    known = {k.name: k for k in SCHEMAS[command]}
    copied = copy.deepcopy(config)
    for name, value in values.items():
        if name not in known:
            raise UserError(f"unknown config key {name!r}")
        _check_key(known[name], name, value)
        with copied.ignore_type():
            copied[name] = _value(value)
    object.__setattr__(copied, _BUILT_FOR, command)
    return copied


def _check_key(key: Key, name: str, value: Any) -> None:
    if key.fields and isinstance(value, (dict, ml_collections.ConfigDict)):
        for field, item in value.items():
            if field not in key.fields:
                raise UserError(f"unknown config key '{name}.{field}'; known here: "
                                f"{', '.join(key.fields)}")
            _check_key(dataclasses.replace(key, fields=(), kind=type(key.default[field])),
                       f"{name}.{field}", item)
        return
    if any(value is a or (type(value) is type(a) and value == a) for a in key.also):
        return
    is_dict = isinstance(value, ml_collections.ConfigDict)
    if (not isinstance(value, key.types) and not (is_dict and dict in key.types)) or (
            isinstance(value, bool) and bool not in key.types):
        also = "".join(f" or {a!r}" for a in key.also)
        raise UserError(f"config key {name!r} expects {key.type_name()}{also}, got "
                        f"{type(value).__name__} {value!r}")
    if key.choices and value not in key.choices:
        raise UserError(f"{name} must be one of {_choices(key)}; got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_range(key, name, value)


def _check_range(key: Key, name: str, value: float) -> None:
    if key.above is not None and not value > key.above:
        raise UserError(f"{name} must be a number > {key.above:g}, got {value!r}")
    low, high = key.low, key.high
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None and isinstance(value, int) and int in key.types:
            least = f"an integer >= {low}" if low <= 1 else f"at least {low}"
            raise UserError(f"{name} must be {least}, got {value!r}")
        bounds = f"between {low:g} and {high:g}" if None not in (low, high) else \
            f">= {low}" if low is not None else f"<= {high}"
        raise UserError(f"{name} must be {bounds}, got {value!r}")


def describe(schema: list[Key], config: ml_collections.ConfigDict | None = None) -> str:
    """The schema as text.

    Per group, each key's type, default (or its value in `config`, with the default where they
    differ), range, resume policy and description."""
    lines, group = [], None
    for key in schema:
        if key.group != group:
            group = key.group
            lines += ["" if lines else None, f"{group}:"]
        allowed = (f" one of {_choices(key)}" if key.choices else
                   _range_text(key))
        also = "".join(f" or {a!r}" for a in key.also)
        value = key.default if config is None or key.name not in config else config[key.name]
        value = value.to_dict() if isinstance(value, ml_collections.ConfigDict) else value
        differs = f" (default {key.default!r})" if value != key.default else ""
        lines.append(f"  {key.name} ({key.type_name()}{also}) = {value!r}{differs}"
                     f"{';' + allowed if allowed else ''}"
                     f"{'; resume may change' if key.resume else ''}")
        lines.append(f"      {key.help}")
    return "\n".join(line for line in lines if line is not None)


def _choices(key: Key) -> str:
    return ", ".join(str(c) if c else "''" for c in key.choices)


def _range_text(key: Key) -> str:
    if key.low is not None and key.high is not None:
        return f" in [{key.low}, {key.high}]"
    if key.low is not None:
        return f" >= {key.low}"
    return f" > {key.above}" if key.above is not None else ""
