"""Pretraining distillation on masked-LM logits (DistilBERT, Sanh et al. 2019): with
`--config.teacher=MODEL_DIR_OR_WORKDIR` the pretraining loss becomes

    alpha * MLM cross-entropy + (1 - alpha) * T^2 * KL(teacher / T || student / T)
    (+ the NSP loss when the student has an NSP head)

with the KL averaged over the masked positions. The teacher is any pretrained BERT
with a masked-LM head reading the run's vocabulary; its depth and width may differ
from the student's. It runs in eval mode inside the jitted train step, its
parameters a non-trained input sharded like the student's, so a resumed run sees
exactly the teacher outputs an uninterrupted one does.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.models import losses
from bert_jax.models.config import BertConfig, check_inputs_fit
from bert_jax.models.heads import BertForPreTraining
from bert_jax.train import sharding
from bert_jax.train.model_config import run_bert_config
from bert_jax.weights import pretrained

# The packed-row inputs the teacher needs (it has no NSP head).
_TEACHER_INPUTS = ("position_ids", "example_ids")


@dataclasses.dataclass(frozen=True)
class MlmTeacher:
    """The teacher's module and the loss settings (static parts of the train step)."""

    model: BertForPreTraining
    temperature: float
    alpha: float

    def soft_loss(self, params, student_logits: jax.Array, batch: dict):
        """T^2-scaled KL from the teacher's to the student's MLM distributions, summed
        over `masked_lm_weights` (the positions the hard loss covers): (sum, weight)."""
        extra = {k: batch[k] for k in _TEACHER_INPUTS if k in batch}
        out = self.model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                               batch["segment_ids"], batch["masked_lm_positions"], **extra,
                               deterministic=True)
        return losses.distillation_kl(student_logits, jax.lax.stop_gradient(out.mlm_logits),
                                      self.temperature, batch["masked_lm_weights"])

    def coefficients(self) -> dict[str, float]:
        """The masked-LM part of the training loss: alpha * hard + (1 - alpha) * soft."""
        return {"mlm_loss": self.alpha, "soft_loss": 1 - self.alpha}


def load_mlm_teacher(config, student: BertConfig, fingerprint: str, *,
                     partitioner: sharding.Partitioner):
    """(MlmTeacher, its parameters placed by `partitioner`, their shardings) of a pretraining
    run's `config.teacher`, with the run's `temperature` and `alpha` (checked with the
    config). The teacher computes with the run's numerics and layer layout, in eval mode
    (`run_bert_config`); `fingerprint` is the run's tokenizer's, which the teacher's must
    equal; `student`'s vocabulary must fit the teacher's."""
    from bert_jax.tokenization import load_tokenizer
    path = config.teacher
    try:
        loaded = pretrained.load(path)
    except FileNotFoundError as e:
        raise UserError(f"teacher {path}: {e}") from None
    if "mlm" not in loaded.params:
        raise UserError(f"teacher {path} has no masked-LM head (a fine-tuned model? distil "
                        "those with `bert-jax distill`)")
    if load_tokenizer(loaded.tokenizer_dir).fingerprint() != fingerprint:
        raise UserError(f"vocabulary mismatch: the teacher {path} reads a different vocabulary "
                        "from this run's tokenizer; set --config.tokenizer to the teacher's")
    bert_config = run_bert_config(config, loaded.config, remat_policy="none",
                                  attention_probs_dropout_prob=0.0)
    check_inputs_fit(bert_config, f"teacher {path}", max_seq_length=config.max_seq_length,
                     vocab_size=student.vocab_size)
    model = BertForPreTraining(bert_config, next_sentence_prediction=False)
    ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
    positions = jnp.zeros((1, config.max_predictions_per_seq), jnp.int32)
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, ids,
                                              positions)["params"])
    shardings = partitioner.shardings_of(nn.get_partition_spec(boxed))
    params = pretrained.init_params(nn.unbox(boxed), loaded.params, shardings, drop=("nsp",),
                                    source=f"teacher {path}")
    return MlmTeacher(model, float(config.temperature), float(config.alpha)), params, shardings
