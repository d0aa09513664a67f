import os

# No model hub anywhere in the suite: fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# `make test` runs two pytest-xdist workers: each computes on one thread (set before torch loads), since two one-thread
# processes beat one two-thread process on a 2-core machine and two two-thread workers would oversubscribe it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest


@pytest.fixture(scope="session")
def toy_cold_dir(tmp_path_factory):
    """The untrained toy model and tokenizer, built once per test session in a temporary cache (a ``Path``)."""
    from pathlib import Path

    from trl_ada.toy import toy_model_dir

    return Path(toy_model_dir(tmp_path_factory.mktemp("toy-cache"), warmup=False))


@pytest.fixture(scope="session")
def tool_model_dir(toy_cold_dir, tmp_path_factory):
    """The toy model with room for a tool-calling prompt (TRL's Qwen3 template renders the tool schema) and that
    template, whose response parser TRL knows."""
    import importlib.resources

    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("tool-model")
    model = AutoModelForCausalLM.from_pretrained(toy_cold_dir)
    model.config.max_position_embeddings = 2048  # TRL's tool loop drops a tool result past the context
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    tokenizer.model_max_length = 2048
    tokenizer.chat_template = (importlib.resources.files(trl) / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.save_pretrained(folder)
    return folder
