import os

# No model hub anywhere in the suite: fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest


@pytest.fixture(scope="session")
def toy_cold_dir(tmp_path_factory):
    """The untrained toy model and tokenizer, built once per test session in a temporary cache."""
    from trl_ada.toy import toy_model_dir

    return toy_model_dir(tmp_path_factory.mktemp("toy-cache"), warmup=False)
