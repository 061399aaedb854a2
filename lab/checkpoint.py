from tests.lab.checkpoint import build_checkpoint  # noqa: F401  (temporary)
