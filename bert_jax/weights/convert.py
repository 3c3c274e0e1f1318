"""Published checkpoints to and from bert_jax model directories (`bert-jax convert`).

  bert-jax convert --from_hf HF_DIR --output MODEL_DIR
  bert-jax convert --from_tf1 GOOGLE_DIR --output MODEL_DIR
  bert-jax convert --model MODEL_DIR --to_hf HF_DIR

GOOGLE_DIR holds bert_model.ckpt.{index,data-*}, bert_config.json and vocab.txt
(as in Google's uncased_L-12_H-768_A-12.zip). MODEL_DIR may also be a
pretraining or fine-tuning workdir. Nothing is written when a conversion fails.
"""

from __future__ import annotations

from typing import Any

from bert_jax.errors import UserError
from bert_jax.host import paths
from bert_jax.host.atomic import atomic_directory
from bert_jax.weights import pretrained
from bert_jax.weights.config_json import ROBERTA_CLASSES


def _google_do_lower_case(google_dir: str) -> bool:
    """Google names its releases `uncased_L-...` / `cased_L-...`; nothing inside says."""
    name = paths.basename(paths.abspath(google_dir)).lower()
    return "uncased" in name or "cased" not in name


def from_hf(hf_dir: str, out: str, overwrite: bool = False) -> pretrained.Pretrained:
    """Converts an HF BERT or ALBERT directory, or a Hub model by name, to a model directory.

    A Hub model is named `hf:ORG/NAME`; see `bert_jax.weights.pretrained.convert_hf_dir`."""
    return pretrained.convert_hf_dir(hf_dir, out, overwrite)


def from_tf1(google_dir: str, out: str, overwrite: bool = False,
             do_lower_case: bool | None = None) -> pretrained.Pretrained:
    """Converts a Google TF1 BERT directory to a model directory.

    The directory holds the checkpoint, bert_config.json and vocab.txt; the model keeps its MLM/NSP
    heads or a run_classifier / run_squad head."""
    from bert_jax.weights import hf, tf1

    config, params = tf1.load_tf1_dir(google_dir)
    pretrained.check_finite(params, google_dir)
    if do_lower_case is None:
        do_lower_case = _google_do_lower_case(google_dir)
    directory = google_dir if paths.isdir(google_dir) else paths.dirname(google_dir)
    vocab = paths.join(directory, "vocab.txt")
    return pretrained.save_converted(hf.wordpiece(vocab, do_lower_case), vocab, config, params,
                                     out, tf1.task_of(params), overwrite)


# --- bert_jax -> Hugging Face -------------------------------------------------------

def hf_architecture(params: dict[str, Any], task: dict[str, Any] | None
                    ) -> tuple[str, bool]:
    """The transformers class that holds exactly these heads: (name, whether it has the pooler).

    A task head's class is its kind's (`task_heads.HEADS`, the kind the task record states:
    `bert_jax.weights.pretrained.task_head`); a bare encoder's follows its pretraining heads."""
    kind = pretrained.task_head(task, params).entry
    if kind.hf_class:
        return kind.hf_class, kind.keeps_pooler
    if "mlm" in params:
        return ("BertForPreTraining", True) if "nsp" in params else ("BertForMaskedLM", False)
    if "nsp" in params:
        return "BertForNextSentencePrediction", True
    return "BertModel", True


def _modernbert_architecture(params: dict[str, Any], checkpoint: str,
                             family: str = "ModernBert") -> tuple[str, bool]:
    """transformers' ModernBert* (EuroBert*) class for the modern encoder.

    The encoder with or without the MLM head (its task heads differ from ours: a head before the
    classifier)."""
    if any(k in params for k in ("classifier", "qa_outputs", "nsp")):
        raise UserError(f"{checkpoint}: transformers' {family} task classes put another "
                        "head before the classifier; export the encoder (or use "
                        "`bert-jax export`)")
    return (f"{family}ForMaskedLM" if "mlm" in params else f"{family}Model"), False


def _electra_architecture(params: dict[str, Any], architecture: str, checkpoint: str,
                          pooler_act: str) -> tuple[str, bool]:
    """transformers' Electra* class for ELECTRA's heads (`architecture`: BERT's class for them).

    The discriminator, the generator, the encoder, or a per-token/span head, or a sequence
    classifier whose pooler is ELECTRA's (gelu) classification head."""
    if "discriminator" in params:
        return "ElectraForPreTraining", False
    same = {"BertModel": "ElectraModel", "BertForMaskedLM": "ElectraForMaskedLM",
            "BertForTokenClassification": "ElectraForTokenClassification",
            "BertForQuestionAnswering": "ElectraForQuestionAnswering"}
    if pooler_act == "gelu":
        same["BertForSequenceClassification"] = "ElectraForSequenceClassification"
    if architecture not in same:
        raise UserError(f"{checkpoint}: transformers' ELECTRA has no class with the heads of "
                        f"{architecture} (its sequence classifiers put another head before "
                        "the classifier); export the encoder (or use `bert-jax export`)")
    return same[architecture], architecture == "BertForSequenceClassification"


def _roberta_or_distilbert_architecture(params: dict[str, Any], architecture: str,
                                        keeps_pooler: bool, config, checkpoint: str
                                        ) -> tuple[str, bool]:
    """The Roberta* (XLMRoberta*, Camembert*) or DistilBert* class for BERT's class `architecture`.

    The same heads, but no next-sentence head, and DistilBERT has no pooler but its classifiers'
    `pre_classifier` (a ReLU: our pooler with pooler_act relu)."""
    family = ROBERTA_CLASSES.get(config.model_type, "DistilBert")
    architecture = architecture.replace("ForPreTraining", "ForMaskedLM")
    if architecture == "BertForNextSentencePrediction":
        architecture = "BertModel"
    if family == "DistilBert":
        keeps_pooler = architecture in ("BertForSequenceClassification",
                                        "BertForMultipleChoice")
        if keeps_pooler and config.pooler_act != "relu":
            raise UserError(f"{checkpoint}: DistilBERT's classifiers apply ReLU after "
                            f"pre_classifier, but this model's pooler applies "
                            f"{config.pooler_act}; export it with `bert-jax export`")
    elif architecture == "BertForSequenceClassification" and config.pooler_act != "tanh":
        raise UserError(f"{checkpoint}: {family}'s classification head applies tanh, but "
                        f"this model's pooler applies {config.pooler_act}")
    return architecture.replace("Bert", family, 1), keeps_pooler


def _hf_task_config(task: dict[str, Any] | None, params: dict[str, Any]) -> dict[str, Any]:
    """HF config fields of a fine-tuned head: labels and problem type."""
    head = pretrained.task_head(task, params)
    if not head.entry.hf_labels or head.entry.param not in params:
        return {}
    num_labels = int(params[head.entry.param]["kernel"].shape[-1])
    labels = pretrained.label_names(task)
    if not labels or len(labels) != num_labels:
        labels = [f"LABEL_{i}" for i in range(num_labels)]
    out = {"id2label": dict(enumerate(labels)),
           "label2id": {name: i for i, name in enumerate(labels)}}
    if head.entry.hf_problem_type:
        out["problem_type"] = head.entry.hf_problem_type
    return out


def to_hf(checkpoint: str, out: str, overwrite: bool = False) -> list[str]:
    """Writes a model directory (or workdir) as an HF directory.

    That is config.json, model.safetensors and the tokenizer files. Returns notes for the user
    (dropped tensors, ...)."""
    from bert_jax.weights.hf import save_hf_dir

    model = pretrained.load(checkpoint)
    params = dict(model.params)
    architecture, keeps_pooler = hf_architecture(params, model.task)
    pooling = model.head.pooling or "pooler"
    if architecture == "BertForSequenceClassification" and pooling != "pooler":
        raise UserError(f"{checkpoint}: the classifier reads {pooling}-pooled states, but "
                        "transformers' sequence classifiers read the first token; "
                        "export it with `bert-jax export` instead")
    if model.config.model_type == "albert":
        if architecture == "BertForNextSentencePrediction":
            raise UserError(f"{checkpoint}: transformers has no ALBERT class for a "
                            "sentence-order head without the MLM head")
        architecture = architecture.replace("Bert", "Albert", 1)  # the same heads
    if model.config.model_type in ("modernbert", "eurobert"):
        family = "EuroBert" if model.config.model_type == "eurobert" else "ModernBert"
        architecture, keeps_pooler = _modernbert_architecture(params, checkpoint, family)
    if model.config.model_type == "electra":
        architecture, keeps_pooler = _electra_architecture(params, architecture, checkpoint,
                                                           model.config.pooler_act)
    notes = []
    if model.config.model_type in (*ROBERTA_CLASSES, "distilbert"):
        architecture, keeps_pooler = _roberta_or_distilbert_architecture(
            params, architecture, keeps_pooler, model.config, checkpoint)
        if "nsp" in params:
            params.pop("nsp")
            notes.append(f"{architecture} has no next-sentence head: nsp was left out")
    if not keeps_pooler and "pooler" in params["bert"]:
        params["bert"] = {k: v for k, v in params["bert"].items() if k != "pooler"}
        notes.append(f"{architecture} has no pooler: bert.pooler was left out")
    if keeps_pooler and "pooler" not in params["bert"]:
        notes.append(f"the checkpoint has no pooler but {architecture} expects one: "
                     "transformers will initialise it randomly")
    crf = sorted(k for k in params if k.startswith("crf_"))
    if crf:
        notes.append(f"transformers has no CRF: {', '.join(crf)} left out (its token "
                     "classifier decodes by argmax)")
    with atomic_directory(out, overwrite, local=True) as tmp:  # safetensors writes locally
        extra = _hf_task_config(model.task, params)
        if model.config.model_type in ("modernbert", "eurobert", *ROBERTA_CLASSES):
            extra.update(_special_token_ids(model))
        save_hf_dir(tmp, model.config, params, architecture, extra)
        notes += _write_hf_tokenizer(model, tmp)
    return notes


def _special_token_ids(model: pretrained.Pretrained) -> dict[str, int]:
    """The special token ids a ModernBERT's or EuroBERT's config.json names, the tokenizer's.

    mmBERT's differ from ModernBERT's; none without a tokenizer."""
    from bert_jax.tokenization import has_tokenizer, load_tokenizer

    if not has_tokenizer(model.tokenizer_dir):
        return {}
    tok = load_tokenizer(model.tokenizer_dir)
    ids = {"bos_token_id": tok.cls_id, "eos_token_id": tok.sep_id, "pad_token_id": tok.pad_id,
           "mask_token_id": tok.mask_id}
    if model.config.model_type in ROBERTA_CLASSES:
        # transformers counts RoBERTa's positions after the padding id, whatever the
        # tokenizer pads with: it must stay position_offset - 1
        ids = {"bos_token_id": tok.cls_id, "eos_token_id": tok.sep_id}
    if model.config.model_type == "modernbert":
        ids.update(cls_token_id=tok.cls_id, sep_token_id=tok.sep_id)
    return ids


def _write_hf_tokenizer(model: pretrained.Pretrained, directory: str) -> list[str]:
    """The tokenizer's files in its family's HF format and an HF tokenizer_config.json.

    The format is vocab.txt, spiece.model, tokenizer.json or sentencepiece.bpe.model."""
    from bert_jax.tokenization import has_tokenizer, load_tokenizer
    from bert_jax.tokenization.hf_files import write_hf_tokenizer

    if not has_tokenizer(model.tokenizer_dir):
        return [f"no tokenizer in {model.tokenizer_dir}: wrote the weights only"]
    return write_hf_tokenizer(load_tokenizer(model.tokenizer_dir), directory,
                              {"model_max_length": model.config.max_positions})
