"""The shipped config files, installed as `bert_jax.configs` (see setup.py). Load them by
bare name (`--config pretrain.py:tiny`) or by path; `bert_jax.train.config_loader` reads them."""
