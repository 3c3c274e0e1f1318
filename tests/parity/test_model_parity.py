"""Our encoder and heads against transformers' PyTorch BERT on the same weights (fp32)."""

import numpy as np
import pytest

from bert_jax.models import layer_layout
from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining
from bert_jax.weights import hf
from bert_jax.weights.config_json import to_hf_dict

from helpers.parity import TOL, padded_batch, scale_weights, state_dict_numpy

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the test extras")
transformers = pytest.importorskip("transformers")


def random_reference(config: BertConfig, seed: int):
    """A transformers BertForPreTraining with every weight random, LayerNorms included.

    Weights are scaled to keep activations of order one: with BERT's 0.02 init
    they stay so small that, e.g., erf and tanh GELU would agree within 1e-4.
    """
    torch.manual_seed(seed)
    hf_config = transformers.BertConfig(**to_hf_dict(config))
    return scale_weights(transformers.BertForPreTraining(hf_config).eval())


SIZES = [
    BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=37, max_position_embeddings=64, type_vocab_size=2),
    BertConfig(vocab_size=300, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
               intermediate_size=200, max_position_embeddings=40, type_vocab_size=3,
               hidden_act="gelu_new"),
]


@pytest.mark.parametrize("config", SIZES, ids=["small", "medium"])
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_pretraining_outputs_match_transformers(config, scan):
    config = config.replace(scan_layers=scan)
    ref = random_reference(config, seed=1)
    ids, mask, segments = padded_batch(config.vocab_size, [17, 9, 3], 24)
    with torch.no_grad():
        expected = ref(torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long),
                       output_hidden_states=True)

    params = hf.params_from_hf(state_dict_numpy(ref), config)
    out = BertForPreTraining(config).apply({"params": params}, ids, mask, segments)
    np.testing.assert_allclose(out.mlm_logits, expected.prediction_logits.numpy(), atol=TOL)
    np.testing.assert_allclose(out.nsp_logits, expected.seq_relationship_logits.numpy(),
                               atol=TOL)
    np.testing.assert_allclose(out.encoder.sequence_output,
                               expected.hidden_states[-1].numpy(), atol=TOL)


def test_mlm_at_masked_positions_equals_full_logits_gathered():
    config = SIZES[0]
    params = hf.params_from_hf(state_dict_numpy(random_reference(config, 2)), config)
    ids, mask, segments = padded_batch(config.vocab_size, [20, 12], 20)
    positions = np.array([[1, 5, 7], [2, 3, 0]], np.int32)
    model = BertForPreTraining(config)
    full = model.apply({"params": params}, ids, mask, segments).mlm_logits
    gathered = model.apply({"params": params}, ids, mask, segments, positions).mlm_logits
    np.testing.assert_allclose(gathered, np.take_along_axis(full, positions[..., None], 1),
                               atol=1e-5)


def test_real_minilm_matches_transformers(minilm_dir):
    directory = minilm_dir
    config, params = hf.load_hf_dir(directory)
    ref = transformers.BertModel.from_pretrained(directory).eval()
    ids, mask, segments = padded_batch(config.vocab_size, [30, 11, 64, 2], 64, seed=3)
    with torch.no_grad():
        expected = ref(torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long))
    out = BertModel(config).apply({"params": params["bert"]}, ids, mask, segments)
    np.testing.assert_allclose(out.sequence_output, expected.last_hidden_state.numpy(), atol=TOL)
    np.testing.assert_allclose(out.pooled_output, expected.pooler_output.numpy(), atol=TOL)


def test_hidden_states_and_attentions_match_transformers():
    config = SIZES[1]
    ref = random_reference(config, seed=4)
    ids, mask, segments = padded_batch(config.vocab_size, [10, 6], 12)
    with torch.no_grad():
        expected = ref.bert(torch.tensor(ids, dtype=torch.long),
                            attention_mask=torch.tensor(mask, dtype=torch.long),
                            token_type_ids=torch.tensor(segments, dtype=torch.long),
                            output_hidden_states=True, output_attentions=True)
    params = hf.params_from_hf(state_dict_numpy(ref), config)
    for scan in (False, True):
        c = config.replace(scan_layers=scan)
        out = BertModel(c, output_hidden_states=True, output_attentions=True).apply(
            {"params": layer_layout.match_layout(params, scan)["bert"]}, ids, mask, segments)
        assert len(out.hidden_states) == config.num_hidden_layers + 1
        for ours, theirs in zip(out.hidden_states, expected.hidden_states):
            np.testing.assert_allclose(ours, theirs.numpy(), atol=TOL)
        # Attention rows of padded queries are irrelevant; compare real ones.
        real = mask.astype(bool)[:, None, :, None]
        for ours, theirs in zip(out.attentions, expected.attentions):
            np.testing.assert_allclose(np.where(real, ours, 0), np.where(real, theirs, 0),
                                       atol=TOL)
