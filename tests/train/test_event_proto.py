"""TensorBoard events without TensorFlow: the bytes tf.summary writes."""
import pytest

from bert_jax.train import event_proto


def test_events_are_tensorflows_bytes():
    pytest.importorskip("tensorflow")
    from tensorflow.core.framework import summary_pb2, types_pb2
    from tensorflow.core.util import event_pb2
    value = summary_pb2.Summary.Value(
        tag="train/loss", tensor={"dtype": types_pb2.DT_FLOAT, "tensor_shape": {},
                                  "float_val": [2.25]},
        metadata={"plugin_data": {"plugin_name": "scalars"}})
    theirs = event_pb2.Event(wall_time=12.5, step=7, summary=summary_pb2.Summary(value=[value]))
    assert event_proto.scalar_event(12.5, 7, "train/loss", 2.25) == theirs.SerializeToString()
    first = event_pb2.Event(wall_time=3.0, file_version="brain.Event:2")
    assert event_proto.file_version_event(3.0) == first.SerializeToString()


def test_a_run_writes_its_scalars_as_events(tmp_path):
    """The event file a MetricsWriter writes (no TensorFlow needed): its version, then each scalar
    with its step."""
    import glob

    from bert_jax.data import tfrecord
    from bert_jax.train.metrics_writer import MetricsWriter
    writer = MetricsWriter(str(tmp_path), total_steps=2)
    writer.write(1, {"loss": 2.5}, prefix="train")
    writer.write(2, {"loss": 2.0}, prefix="train")
    writer.close()
    [path] = glob.glob(str(tmp_path / "tensorboard" / "*" / "events.out.tfevents.*"))
    events = [event_proto.Event.FromString(r) for r in tfrecord.read_records(path)]
    assert events[0].file_version == "brain.Event:2"
    assert [(e.step, v.tag, list(v.tensor.float_val)) for e in events[1:]
            for v in e.summary.value] == [(1, "loss", [2.5]), (2, "loss", [2.0])]
