"""Model and dataset names on the command line, checked before any weights load: a local folder that is not there,
or a Hub id that can be neither downloaded nor read from the cache, is one line in a few seconds instead of a chained
traceback after huggingface_hub's retries (about 25 s for a model, 30 s for a dataset, when the Hub is unreachable).

Used by ``trl-ada train`` (``--model_name_or_path``, ``--reward_model_name_or_path``, ``--dataset_name``),
``trl-ada prepare`` and ``trl-ada eval`` (``--model``).
"""

from __future__ import annotations

import difflib
import os
import pathlib
import sys

from .errors import RunError, UsageError

HUB_CHECK_SECONDS = 5.0  # how long the Hub gets to answer before it counts as unreachable


def check_model_name(
    name: str, revision: str | None = None, flag: str = "--model_name_or_path", probe_hub: bool = True
) -> str:
    """``name`` (a local model folder or a Hub id) as it should be loaded, or a UsageError or RunError saying why not.

    A local folder must hold ``config.json`` (or a PEFT adapter's ``adapter_config.json``). A name that can only be
    a path (see :func:`looks_local`) but names no folder is a UsageError ("no such folder"), not a Hub lookup that
    fails with "Repo id must be in the form...". A Hub id is checked against the cache and the Hub's reachability
    (:func:`check_hub_model`; ``probe_hub=False``: only offline, without a request). ``ReinforceAdaTrainer`` runs
    this too, with ``flag="model"`` and no probe, before TRL loads the model.
    """
    path = pathlib.Path(name).expanduser()
    if path.is_dir():
        if not any((path / marker).is_file() for marker in ("config.json", "adapter_config.json")):
            raise UsageError(
                f"{flag} {name}: a folder, but not a model: it has no config.json (save_pretrained writes one; a "
                "training run's model is its --output_dir or one of its checkpoint-N folders)."
            )
        return name if path == pathlib.Path(name) else str(path)
    if path.exists():
        raise UsageError(f"{flag} {name}: a file, not a model folder (a folder holding config.json and the weights).")
    if looks_local(name):
        raise UsageError(f"{flag} {name}: no such folder{nearby(path)}.")
    check_hub_model(name, revision, flag, probe_hub)
    return name


def looks_local(name: str) -> bool:
    """Whether ``name`` can only mean a local path: it starts with ``/``, ``.`` or ``~``, holds a backslash or two
    slashes (a Hub id is ``name`` or ``namespace/name``), its first component is a local folder (``runs/try`` next
    to a ``runs/`` folder), or it is not a valid Hub id at all."""
    from huggingface_hub.utils import validate_repo_id

    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
        return True
    if "/" in name and pathlib.Path(name.split("/", 1)[0]).is_dir():
        return True
    try:
        validate_repo_id(name)
    except ValueError:  # HFValidationError
        return True
    return False


def nearby(path: pathlib.Path) -> str:
    """A hint for a folder that does not exist: the closest names in the deepest folder that does."""
    parent = path.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return ""
    try:
        siblings = sorted(child.name for child in parent.iterdir() if child.is_dir())
    except OSError:
        return ""
    wanted = path.relative_to(parent).parts[0] if path.is_relative_to(parent) else path.name
    close = difflib.get_close_matches(wanted, siblings, n=3)
    if close:
        return f" (did you mean {' or '.join(str(parent / name) for name in close)}?)"
    return ""


def check_hub_model(
    name: str, revision: str | None = None, flag: str = "--model_name_or_path", probe_hub: bool = True
) -> None:
    """Fail in seconds, in one line, when the Hub model ``name`` can be neither downloaded nor read from the cache.

    Offline (``HF_HUB_OFFLINE=1``): the model must be in the Hugging Face cache. Online, with ``probe_hub``: the Hub
    gets ``HUB_CHECK_SECONDS`` to answer; unreachable, a cached model is used offline (huggingface_hub would otherwise
    retry for about 25 s before falling back to the cache) and an uncached one is a RunError. Whether the repository
    exists is left to the download, which says so itself.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    cached = isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    hint = "" if "/" in name else nearby(pathlib.Path(name))  # a bare name may be a mistyped folder
    where = f"{flag} {name}: not a local folder{hint}, and not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    fixes = (
        f"download it where there is network (`hf download {name}`) and copy the cache here (or point HF_HOME at "
        "it), or pass a local folder"
    )
    if constants.is_offline_mode():
        if not cached:
            raise RunError(f"{where}, and HF_HUB_OFFLINE is set, so it cannot be downloaded: {fixes}.")
        return
    if not probe_hub:
        return
    require_reachable(name, where, fixes, cached)


def require_reachable(name: str, where: str, fixes: str, cached: bool) -> None:
    """The Hub answers, or ``name`` is cached (then loaded from the cache at once, `go_offline`); else one `RunError`
    saying where the name was looked for and how to fix it."""
    from huggingface_hub import constants

    reason = hub_unreachable(constants.ENDPOINT)
    if reason is None:
        return
    if not cached:
        raise RunError(
            f"{where}, and the Hub ({constants.ENDPOINT}) cannot be reached ({reason}): check the network (and "
            f"HF_ENDPOINT or a proxy), or {fixes}."
        )
    go_offline(name, reason)


def go_offline(name: str, reason: str) -> None:
    """The Hub cannot be reached but ``name`` is cached: load it from the cache at once rather than after the retries
    (about 25 s for a model, 30 s for a dataset). huggingface_hub reads its flag per request; datasets copies it when
    it is imported, so its copy is set too."""
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = "1"  # for processes started from here
    if "datasets" in sys.modules:
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True
    print(
        f"The Hub ({constants.ENDPOINT}) cannot be reached ({reason}): using the cached copy of {name}, offline.",
        file=sys.stderr,
    )


def dataset_cached(name: str) -> bool:
    """Whether the Hub dataset ``name`` has been loaded before and can be loaded offline: datasets then finds it
    under ``HF_DATASETS_CACHE/<namespace>___<name in snake case>/<config>/<version>/<hash>`` (its
    ``CachedDatasetModuleFactory``, the one place it looks when offline)."""
    import datasets
    from datasets.naming import camelcase_to_snakecase

    parts = name.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = pathlib.Path(datasets.config.HF_DATASETS_CACHE).expanduser() / "___".join(parts)
    return any(path.is_dir() for path in root.glob("*/*/*"))


def check_hub_dataset(name: str, flag: str = "--dataset_name") -> None:
    """Fail at once, in one line, when the Hub dataset ``name`` can be neither downloaded nor loaded from the cache:
    offline (``HF_HUB_OFFLINE``) it must be cached; online the Hub gets ``HUB_CHECK_SECONDS`` to answer, as for a
    model (:func:`check_hub_model`), and a cached dataset is then loaded offline. Whether it exists on the Hub is
    left to the download, which says so itself."""
    import datasets
    from huggingface_hub import constants

    cached = dataset_cached(name)
    hint = "" if "/" in name else nearby(pathlib.Path(name))
    where = (
        f"{flag} {name}: not a local file or folder{hint}, and not in the datasets cache "
        f"({datasets.config.HF_DATASETS_CACHE})"
    )
    fixes = (
        "load it once where there is network and copy the cache here (or point HF_HOME at it), or pass a local "
        "file or folder (`trl-ada prepare` writes one)"
    )
    if constants.is_offline_mode() or datasets.config.HF_HUB_OFFLINE:
        if not cached:
            raise RunError(f"{where}, and HF_HUB_OFFLINE is set, so it cannot be downloaded: {fixes}.")
        datasets.config.HF_HUB_OFFLINE = True  # offline for huggingface_hub (a model found so): for datasets too
        return
    require_reachable(name, where, fixes, cached)


def hub_unreachable(endpoint: str, timeout: float = HUB_CHECK_SECONDS) -> str | None:
    """Why the Hub at ``endpoint`` cannot be reached (one request, ``timeout`` seconds), or None when it answers.

    Any HTTP answer, an error status included, means it is reachable; only a failure to connect or to answer in time
    counts. huggingface_hub's own client is used, so proxies and custom transports apply as for the download.
    """
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=timeout)
    except Exception as error:  # httpx's connection and timeout errors; httpx is not a dependency of its own here
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[0]}" if text else f"{type(error).__name__} after {timeout:g} s"
    return None
