"""Host plumbing.

Run paths (local or gs://), atomic directories, text encodings, workdirs and their locks, the
backends' environment. No JAX."""
