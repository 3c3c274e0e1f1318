"""Google's TF1 checkpoints written from a transformers model's weights."""


LAYERS = 2


GOOGLE_CONFIG = dict(vocab_size=40, hidden_size=32, num_hidden_layers=LAYERS,
                     num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                     max_position_embeddings=64, type_vocab_size=2, initializer_range=0.02)


def google_names():
    """HF name -> (Google's TF1 variable name, stored transposed), written out as in
    google-research/bert's modeling.py rather than derived by the code under test."""
    names = {
        "bert.embeddings.word_embeddings.weight": ("bert/embeddings/word_embeddings", False),
        "bert.embeddings.position_embeddings.weight":
            ("bert/embeddings/position_embeddings", False),
        "bert.embeddings.token_type_embeddings.weight":
            ("bert/embeddings/token_type_embeddings", False),
        "bert.embeddings.LayerNorm.weight": ("bert/embeddings/LayerNorm/gamma", False),
        "bert.embeddings.LayerNorm.bias": ("bert/embeddings/LayerNorm/beta", False),
        "bert.pooler.dense.weight": ("bert/pooler/dense/kernel", True),
        "bert.pooler.dense.bias": ("bert/pooler/dense/bias", False),
        "cls.predictions.transform.dense.weight": ("cls/predictions/transform/dense/kernel", True),
        "cls.predictions.transform.dense.bias": ("cls/predictions/transform/dense/bias", False),
        "cls.predictions.transform.LayerNorm.weight":
            ("cls/predictions/transform/LayerNorm/gamma", False),
        "cls.predictions.transform.LayerNorm.bias":
            ("cls/predictions/transform/LayerNorm/beta", False),
        "cls.predictions.bias": ("cls/predictions/output_bias", False),
        "cls.seq_relationship.weight": ("cls/seq_relationship/output_weights", False),
        "cls.seq_relationship.bias": ("cls/seq_relationship/output_bias", False),
    }
    for i in range(LAYERS):
        hf, g = f"bert.encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for hf_part, g_part in [("attention.self.query", "attention/self/query"),
                                ("attention.self.key", "attention/self/key"),
                                ("attention.self.value", "attention/self/value"),
                                ("attention.output.dense", "attention/output/dense"),
                                ("intermediate.dense", "intermediate/dense"),
                                ("output.dense", "output/dense")]:
            names[f"{hf}.{hf_part}.weight"] = (f"{g}/{g_part}/kernel", True)
            names[f"{hf}.{hf_part}.bias"] = (f"{g}/{g_part}/bias", False)
        for hf_part, g_part in [("attention.output.LayerNorm", "attention/output/LayerNorm"),
                                ("output.LayerNorm", "output/LayerNorm")]:
            names[f"{hf}.{hf_part}.weight"] = (f"{g}/{g_part}/gamma", False)
            names[f"{hf}.{hf_part}.bias"] = (f"{g}/{g_part}/beta", False)
    return names


def write_tf1_checkpoint(prefix, variables):
    """A TF1 checkpoint through tf.compat.v1.train.Saver, so names are exactly `variables`."""
    import tensorflow as tf

    with tf.Graph().as_default():
        tf_vars = [tf.compat.v1.get_variable(name, initializer=value)
                   for name, value in variables.items()]
        saver = tf.compat.v1.train.Saver(tf_vars)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)


