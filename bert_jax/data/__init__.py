"""Pretraining data: corpus reading, create-data, masking and the tf.data pipeline."""
