"""The `hf` source: real benchmark sets through the `datasets` library (an optional extra).

    pip install 'specsweep[datasets]'
    python -m bench task=gsm8k limit=20       # also mt_bench, humaneval, wmt14, cnn_dailymail,
                                              # natural_questions (conf/task/<name>.yaml)

The task YAML names `dataset`, `config` (optional), `split` and the `fields` that turn a row into
a prompt (tasks/rows.py). The Hub is used when reachable. When HF_HUB_OFFLINE (or
HF_DATASETS_OFFLINE) is set, or the Hub cannot be reached, only the local cache is read, without
datasets' minute of retries, and a miss becomes one line that names the dataset and the command
that pre-fetches it on a machine with network.
"""

from __future__ import annotations

import contextlib
import os
import socket
from urllib.parse import urlparse

from groundfloor.errors import UserError
from tasks.prompt import Prompt
from tasks.rows import rows_to_prompts

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
INSTALL = "pip install 'specsweep[datasets]'"


def offline_requested() -> bool:
    return any(
        os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in OFFLINE_VARS
    )


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connect to the Hub endpoint; behind a proxy, assume reachable and let datasets try."""
    if any(os.environ.get(v) for v in PROXY_VARS):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def offline_mode(datasets_module):
    """Cache-only loading: the flags datasets and huggingface_hub read when they are called."""
    import huggingface_hub.constants as hub_constants

    targets = [
        (datasets_module.config, "HF_HUB_OFFLINE"),
        (datasets_module.config, "HF_DATASETS_OFFLINE"),
        (hub_constants, "HF_HUB_OFFLINE"),
    ]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in targets if hasattr(obj, attr)]
    try:
        for obj, attr, _ in saved:
            setattr(obj, attr, True)
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def describe(cfg: dict) -> str:
    config = f"config {cfg['config']!r}, " if cfg.get("config") else ""
    return f"{cfg['dataset']!r} ({config}split {cfg['split']!r})"


def prefetch_command(cfg: dict) -> str:
    args = [repr(cfg["dataset"])] + ([repr(cfg["config"])] if cfg.get("config") else [])
    args.append(f"split={cfg['split']!r}")
    return f'python -c "import datasets; datasets.load_dataset({", ".join(args)})"'


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def load_rows(cfg: dict, name: str):
    """The dataset split's rows (a datasets.Dataset), or one UserError line."""
    for key in ("dataset", "split"):
        if not cfg.get(key):
            raise UserError(f"task={name!r} has source=hf but no {key!r} in its YAML")
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"task={name!r} reads {cfg['dataset']!r} with the `datasets` library, "
            f"which is not installed: {INSTALL}"
        )
    why = (
        "offline (HF_HUB_OFFLINE is set)"
        if offline_requested()
        else None
        if hub_reachable()
        else "unreachable"
    )
    args = [cfg["dataset"]] + ([cfg["config"]] if cfg.get("config") else [])
    kwargs = {"split": cfg["split"]}
    if cfg.get("cache_dir"):
        kwargs["cache_dir"] = os.path.expanduser(str(cfg["cache_dir"]))
    try:
        with offline_mode(datasets) if why else contextlib.nullcontext():
            return datasets.load_dataset(*args, **kwargs)
    except Exception as e:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        if why:
            raise UserError(
                f"task={name!r}: dataset {describe(cfg)} is not in the local cache and "
                f"the Hugging Face Hub is {why}; pre-fetch it on a machine with "
                f"network: {prefetch_command(cfg)} (then copy ~/.cache/huggingface)"
            )
        raise UserError(f"task={name!r}: cannot load dataset {describe(cfg)} ({_first_line(e)})")


def load(cfg: dict, name: str) -> list[Prompt]:
    return rows_to_prompts(load_rows(cfg, name), cfg, name)
