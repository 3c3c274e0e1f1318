"""A tiny pretraining model's sharded train states and their checkpoints."""

from bert_jax.models.heads import BertForPreTraining
from bert_jax.models.presets import preset
from bert_jax.pretrain.steps import dummy_inputs
from bert_jax.train import checkpoint, sharding
from bert_jax.train.optim import make_optimizer
from bert_jax.train.train_state import StatePlan

# Every sharded dimension divides 8, so any 8-device mesh is valid.
CONFIG = preset("tiny", vocab_size=128, hidden_size=32, num_attention_heads=8,
                    intermediate_size=64, max_position_embeddings=32, num_hidden_layers=1)


BATCH, LENGTH, PREDICTIONS = 8, 16, 4


MODEL = BertForPreTraining(CONFIG)


TX, _ = make_optimizer(learning_rate=1e-3, num_train_steps=10, warmup_steps=1)


def init_fn(key):
    return MODEL.init(key, *dummy_inputs(1, LENGTH, PREDICTIONS))["params"]


def plan_on(devices, mesh_shape=None):
    mesh = sharding.make_mesh(mesh_shape or {"fsdp": -1}, devices=devices)
    return StatePlan.build(init_fn, TX, sharding.Partitioner(mesh))


def state_on(devices, mesh_shape=None, seed=0):
    plan = plan_on(devices, mesh_shape)
    return plan.create(seed), plan


def restore(workdir, target, **kwargs):
    with checkpoint.Checkpointer(str(workdir)) as ckpt:
        return ckpt.restore(target, **kwargs)


