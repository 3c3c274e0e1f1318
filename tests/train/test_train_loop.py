"""The one training loop (`train_loop`) with a stand-in step: the learning rate logged at
the optimizer's own update count, the checkpoint cadence, and the stops."""

import logging
from typing import NamedTuple

import jax.numpy as jnp
import pytest

from bert_jax.errors import NonFiniteError
from bert_jax.train import train_loop


class State(NamedTuple):
    step: jnp.ndarray
    nonfinite_steps: jnp.ndarray


class Writer:
    def __init__(self):
        self.records = []

    def write(self, step, metrics, prefix="train"):
        self.records.append((step, dict(metrics)))

    def progress(self, step, metrics, final=False):
        pass


def make_loop(bad_steps=(), stop_at_first=False, log_every=1):
    """A loop of 6 steps whose step `s` (1-based) is non-finite when s is in `bad_steps`."""
    def step_fn(state, batch):
        step = int(state.step) + 1
        bad = step in bad_steps
        metrics = {"loss": jnp.float32(step), "grad_norm": jnp.float32(1.0),
                   "nonfinite": jnp.bool_(bad)}
        return State(state.step + 1, state.nonfinite_steps + int(bad)), metrics
    guard = train_loop.NonFiniteGuard(5, stop_at_first=stop_at_first, levers="x",
                                      log=logging.getLogger("test"))
    return train_loop.Loop(State(jnp.int32(0), jnp.int32(0)), step_fn, lambda b: b,
                           num_steps=6, writer=Writer(), guard=guard,
                           log=train_loop.LogOptions(log_every, lambda count: 10.0 * count))


def batches():
    while True:
        yield {}


def test_the_learning_rate_is_the_schedule_at_the_optimizers_update_count():
    """Step 3's update was skipped: step 4 uses the rate of update 2, as the optimizer
    (whose count did not advance) does."""
    loop = make_loop(bad_steps=(3,))
    assert loop.run(batches()) == train_loop.DONE
    rates = [m["learning_rate"] for _, m in loop.writer.records]
    assert rates == [0.0, 10.0, 20.0, 20.0, 30.0, 40.0]
    assert loop.writer.records[-1][1]["nonfinite_steps"] == 1.0


def test_checkpoints_at_the_cadence_and_the_last_step_and_a_preemption_stops_after_one():
    saved = []
    checkpoint = train_loop.Every(4, lambda loop: saved.append(loop.step))
    assert make_loop().run(batches(), checkpoint=checkpoint) == train_loop.DONE
    assert saved == [4, 6]

    class Watcher:
        def reached(self, step):
            return step == 3

    saved.clear()
    loop = make_loop()
    assert loop.run(batches(), checkpoint=checkpoint, watcher=Watcher()) == \
        train_loop.PREEMPTED
    assert saved == [3] and loop.step == 3


def test_a_diverged_step_stops_before_its_checkpoint():
    saved = []
    loop = make_loop(bad_steps=(2,), stop_at_first=True, log_every=5)
    with pytest.raises(NonFiniteError, match="^step 2: "):
        loop.run(batches(), checkpoint=train_loop.Every(2, lambda lp: saved.append(lp.step)))
    assert saved == []


def test_an_action_runs_when_due_and_the_data_may_end_first():
    seen = []
    loop = make_loop()
    action = train_loop.Every(0, lambda lp: seen.append(lp.step), when=lambda lp: lp.step == 2)
    assert loop.run(iter([{}] * 4), [action]) == train_loop.DONE
    assert seen == [2] and loop.step == 4  # the data ended before num_steps: no error
