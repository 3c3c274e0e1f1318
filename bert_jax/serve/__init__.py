"""Using a trained model: embeddings and serving exports."""
