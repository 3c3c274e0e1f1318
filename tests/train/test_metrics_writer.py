"""MetricsWriter: resumed runs (pretraining) append to the log, restarted runs
(fine-tuning) start it over, so a workdir's curves are those of the run it holds."""

import json

from bert_jax.train.metrics_writer import MetricsWriter


def logged_steps(workdir):
    return [json.loads(line)["step"] for line in (workdir / "metrics.jsonl").open()]


def run(workdir, steps, **kwargs):
    writer = MetricsWriter(str(workdir), tensorboard=False, **kwargs)
    for step in steps:
        writer.write(step, {"loss": 1.0 / step})
    writer.close()
    return writer


def test_resumed_run_appends_and_restarted_run_starts_over(tmp_path):
    assert not run(tmp_path, [1, 2]).replaced_earlier_run
    run(tmp_path, [3, 4])
    assert logged_steps(tmp_path) == [1, 2, 3, 4]
    (tmp_path / "tensorboard" / "train").mkdir(parents=True)
    assert run(tmp_path, [1, 2], append=False).replaced_earlier_run
    assert logged_steps(tmp_path) == [1, 2]
    assert not (tmp_path / "tensorboard").exists()
    fresh = tmp_path / "fresh"
    assert not run(fresh, [1], append=False).replaced_earlier_run


def test_without_tensorflow_the_tensorboard_events_are_written(tmp_path, monkeypatch):
    """A base install (no TensorFlow, as on Colab's TPU runtime) logs metrics.jsonl and
    TensorBoard's event files alike."""
    import sys
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` fails
    writer = MetricsWriter(str(tmp_path), stream=None)
    writer.write(1, {"loss": 2.0}, prefix="train")
    writer.close()
    assert logged_steps(tmp_path) == [1]
    assert list((tmp_path / "tensorboard").glob("*/events.out.tfevents.*"))
