"""Test-suite setup: 8 fake CPU devices, so sharding tests can build real meshes.

XLA reads the flag when JAX creates its CPU backend, which must not have happened
yet; conftest.py is imported before any test module. Single-device code is
unaffected: unsharded arrays live on device 0 as usual.
"""
import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()
