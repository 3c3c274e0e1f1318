"""Task distillation (`bert-jax distill`): a student learns a fine-tuned teacher's outputs.

It learns them on the teacher's labeled data, through the fine-tuning loop (`job`).

    loss = alpha * task loss + (1 - alpha) * soft loss
           + hidden_weight * hidden-state MSE + attention_weight * attention MSE

The soft loss is the task's (`Task.soft_loss`): Hinton et al.'s
T^2 * KL(softmax(teacher/T) || softmax(student/T)) per example (classification; over the
choices in multiple choice), per labeled token (tagging) or over start and end positions
(span QA, their mean); regression uses the MSE to the teacher's score.
The teacher runs in eval mode inside the jitted train step, its parameters a
non-trained input of every step: that works unchanged with packing, length
bucketing and every task's output shape, and gives the hidden states and attention
probabilities TinyBERT-style matching needs; it costs one teacher forward pass per
step.

TinyBERT-style matching (Jiao et al. 2020) maps student layer j (0-based, of M) to
teacher layer (j + 1) * N // M - 1 (of N), so the last layers meet, and the
embeddings to the embeddings. Across widths (TinyBERT's 312-wide student of a 768-wide
teacher) the student's hidden states go through a learned projection W_h (student
width -> teacher width, one for every layer, as in TinyBERT) before the MSE: a
parameter of the distillation objective, trained with the student
(`StudentWithProjection`) and dropped from the saved student. Attention probabilities
are compared per head when the head counts are equal; otherwise as the mean over
heads of each model ([B, L, L] against [B, L, L]), since no head of one model
corresponds to a head of the other. Both need unrolled layers and einsum attention.

The student is a preset (random encoder, the teacher's tokenizer) or a model
directory; `student_layers=N` keeps N of its layers, 0-based i * L // N for
i < N (DistilBERT-style: 2 of 6 -> 0, 3; 3 of 6 -> 0, 2, 4).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import ml_collections

from bert_jax.errors import UserError
from bert_jax.finetune import inference, job, model_source, schedule, selection, tasks
from bert_jax.finetune.objective import TaskObjective
from bert_jax.host import folders, outputs, paths
from bert_jax.models import layer_layout, losses, matching
from bert_jax.models.matching import PROJECTION, StudentWithProjection
from bert_jax.tokenization import load_tokenizer
from bert_jax.train import run_config, sharding
from bert_jax.weights import pretrained

# The distillation keys of the fine-tuning schema: a teacher's saved config (itself perhaps
# distilled) gives way to their recipe defaults.
DISTILL_KEYS = tuple(k.name for k in run_config.FINETUNE if k.group.startswith("distill"))


def _names_a_model(student: str) -> bool:
    """A model directory, a workdir or a Hub model, as opposed to a preset's name."""
    return paths.isdir(student) or pretrained.is_hub_name(student)


def load_finetuned_teacher(path: str) -> pretrained.Pretrained:
    """A fine-tuned model: a fine-tuning workdir (its best model) or a model directory.

    The model directory is one saved by fine-tuning."""
    try:
        teacher = pretrained.load(path)
    except FileNotFoundError as e:
        raise UserError(f"--teacher {path}: {e}") from None
    if not teacher.task or "config" not in teacher.task:
        raise UserError(f"--teacher {path} is not a fine-tuned model (no fine-tuning task "
                        "saved with it): fine-tune it first with `bert-jax finetune`, or "
                        "distil a pretrained teacher's MLM logits with `bert-jax pretrain "
                        "--config.teacher=...`")
    return teacher


def distill_config(teacher: pretrained.Pretrained, student: str,
                   overrides: list[str] = ()) -> ml_collections.ConfigDict:
    """The teacher's fine-tuning config with the distillation keys, student and overrides applied.

    The config is `inference.saved_config`, which checks it; the student is a model directory or a
    preset name; the overrides are `KEY=VALUE`."""
    defaults = inference.recipe_defaults(teacher.task["config"]["task"])
    # A model the student starts from (a fine-tuning workdir stands for its kept
    # model, a Hub name for its converted directory), or a preset's name.
    ref = pretrained.open_model(student) if _names_a_model(student) else None
    changes = {**{key: defaults[key] for key in DISTILL_KEYS},
               "teacher": teacher.tokenizer_dir, "seeds": "", "freeze": "",
               "sweep": dict.fromkeys(run_config.SWEEP_KEYS, ""),
               "init_from": ref.directory if ref else "", "model": "" if ref else student,
               # A random student reads the teacher's vocabulary.
               "tokenizer": "" if ref else teacher.tokenizer_dir}
    return inference.saved_config(teacher.task, overrides, changes)


def check_distillation_config(config) -> None:
    """The checks of a distillation config that need no model.

    The config is `distill_config`'s, whose schema check ran when it was built. The checks are the
    fine-tuning ones beyond the schema (`schedule.check_finetuning_config`), then the
    distillation's."""
    schedule.check_finetuning_config(config)
    if selection.is_sweep(config):
        raise UserError("distill runs one setting: seeds and sweep.* are not supported")


def evenly_spaced_layers(total: int, keep: int) -> list[int]:
    return [i * total // keep for i in range(keep)]


def take_layers(encoder_params: dict, bert_config, keep: int):
    """An encoder's parameters and config cut to `keep` evenly spaced layers.

    Returns (params, config, the 0-based layers kept)."""
    chosen = evenly_spaced_layers(bert_config.num_hidden_layers, keep)
    layers = layer_layout.to_unscanned({"encoder": encoder_params["encoder"]})["encoder"]
    params = {**encoder_params, "encoder": {f"layer_{i}": layers[f"layer_{j}"]
                                            for i, j in enumerate(chosen)}}
    return params, bert_config.replace(num_hidden_layers=keep), chosen


def student_source(config, teacher: pretrained.Pretrained) -> model_source.ModelSource:
    """The student's encoder (`resolve_model`), cut to `student_layers` layers, and checked.

    It is checked to read the teacher's vocabulary and, if fine-tuned, to be of the teacher's
    task."""
    source = model_source.resolve_model(config)
    if config.student_layers:
        total = source.config.num_hidden_layers
        if source.encoder_params is None:
            raise UserError("student_layers needs a student model directory to take layers "
                            "from; a preset student sets its own depth")
        if config.student_layers > total:
            raise UserError(f"student_layers={config.student_layers} but the student "
                            f"{source.origin} has {total} layers")
        params, bert_config, chosen = take_layers(source.encoder_params, source.config,
                                                  config.student_layers)
        source = model_source.ModelSource(
            bert_config, source.tokenizer, params,
            f"{source.origin} (layers {', '.join(map(str, chosen))})", source.task)
    teacher_tokenizer = load_tokenizer(teacher.tokenizer_dir)
    mine, theirs = source.tokenizer, teacher_tokenizer
    if mine.vocab_size != theirs.vocab_size or any(
            mine.id_to_token(i) != theirs.id_to_token(i) for i in range(mine.vocab_size)):
        raise UserError(f"vocabulary mismatch: the student {source.origin} has a different "
                        f"vocabulary ({mine.vocab_size} tokens) from the teacher "
                        f"({theirs.vocab_size} tokens); the student must read the teacher's")
    if source.task and source.task.get("name") != teacher.task["name"]:
        raise UserError(f"task mismatch: the student {config.init_from} was fine-tuned on "
                        f"{source.task.get('name')!r}, the teacher on "
                        f"{teacher.task['name']!r}")
    return source


# --- the loss ---------------------------------------------------------------------------

def coefficients(settings: dict) -> dict[str, float]:
    """The distillation loss as a sum of `distill_loss`'s term means (module docstring)."""
    out = {"task_loss": settings["alpha"], "soft_loss": 1 - settings["alpha"]}
    for name in ("hidden", "attention"):
        if settings[f"{name}_weight"] > 0:
            out[f"{name}_loss"] = settings[f"{name}_weight"]
    return out


def distill_loss(params, batch, teacher_params, dropout_key, *, model, task, rules,
                 teacher_model, settings):
    """The trainer's `TaskObjective.loss` for distillation.

    {name: (weighted sum, weight)} of the task loss (`task_loss`), the soft loss and the matching
    losses, which `coefficients(settings)` weigh."""
    inputs = task.model_inputs(batch)
    match = settings["hidden_weight"] > 0 or settings["attention_weight"] > 0
    project = matching.projector(params.get(PROJECTION))
    if isinstance(model, StudentWithProjection):
        params = {k: v for k, v in params.items() if k != PROJECTION}
        model = model.student
    capture = matching.CAPTURE if match else {}
    if match:  # every position of every layer, not just what the heads read
        model, teacher_model = (m.clone(every_position=True) if hasattr(m, "every_position")
                                else m for m in (model, teacher_model))
    with nn.logical_axis_rules(rules):
        student = model.apply({"params": params}, **inputs, deterministic=False,
                              rngs={"dropout": dropout_key}, **capture)
        teacher = teacher_model.apply({"params": teacher_params}, **inputs, deterministic=True,
                                      **capture)
    teacher = jax.lax.stop_gradient(teacher)
    if match:
        (student, student_vars), (teacher, teacher_vars) = student, teacher
    terms = task.loss(student, batch)
    terms["task_loss"] = terms.pop("loss")
    terms["soft_loss"] = task.soft_loss(student, teacher, batch, settings["temperature"])
    if match:
        mask = inputs["input_mask"]
        mask = mask.reshape(-1, mask.shape[-1])  # multiple choice: [B, C, L] -> [B * C, L]
        terms.update(losses.matching_losses(
            matching.captured_states(student_vars["intermediates"], model.config),
            matching.captured_states(teacher_vars["intermediates"], teacher_model.config),
            mask, hidden=settings["hidden_weight"] > 0,
            attention=settings["attention_weight"] > 0, project=project))
    return terms


# --- the run ----------------------------------------------------------------------------

def distill(config, teacher: pretrained.Pretrained, workdir: str) -> dict:
    """Distils `teacher` into the student `config` names.

    Writes and returns what a fine-tuning run does (WORKDIR/best, eval_results.json)."""
    outputs.check_workdir(workdir, folders.DISTILLATION,
                          {"--teacher": teacher.tokenizer_dir, "--student": config.init_from})
    check_distillation_config(config)
    teacher_config = inference.saved_config(teacher.task)
    if config.task != teacher.task["name"]:
        raise UserError(f"task mismatch: the teacher was fine-tuned on "
                        f"{teacher.task['name']!r}, the config asks for {config.task!r}")
    teacher_task = tasks.from_spec(teacher.task, teacher_config)
    teacher_task.check_distillable()
    source = student_source(config, teacher)
    teacher_model = teacher_task.model(teacher.config)
    matching.check_matching(source.config, teacher.config, hidden_weight=config.hidden_weight,
                            attention_weight=config.attention_weight)
    teacher_params, teacher_shardings = inference.place_model_params(
        teacher, teacher_model, sharding.Partitioner.from_config(config))
    settings = {k: float(config[k]) for k in ("temperature", "alpha", "hidden_weight",
                                              "attention_weight")}
    width = teacher.config.hidden_size
    projected = config.hidden_weight > 0 and source.config.hidden_size != width
    objective = TaskObjective(
        loss=functools.partial(distill_loss, teacher_model=teacher_model, settings=settings),
        coefficients=coefficients(settings),
        extra=teacher_params, extra_shardings=teacher_shardings,
        describe=f"distilling {teacher.tokenizer_dir} (T={config.temperature:g}, "
                 f"alpha={config.alpha:g}"
                 + (f", hidden states projected {source.config.hidden_size} -> {width}"
                    if projected else "") + ") into",
        wrap_model=functools.partial(StudentWithProjection, teacher_width=width)
        if projected else None,
        unsaved=(PROJECTION,) if projected else ())
    session = job.Finetuning(config, objective, source)
    student_task = session.prepared(int(config.seed)).task
    if student_task.spec() != {**student_task.spec(), **_label_spec(teacher.task)}:
        raise UserError(f"task mismatch: the student's training data gives labels "
                        f"{student_task.spec().get('label_names')}, the teacher was trained on "
                        f"{teacher.task.get('label_names')}")
    return session.run(config, workdir)


def _label_spec(spec: dict) -> dict:
    return {k: spec[k] for k in ("label_names", "num_labels") if k in spec}
