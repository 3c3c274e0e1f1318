"""Helpers shared by the test modules: builders of configs, files, reference models and
subprocesses. tests/ is on pytest's `pythonpath`, so a test module imports them as
`from helpers.finetune import micro_config`; the shared fixtures are in tests/conftest.py."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
