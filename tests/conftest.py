"""Shared fixtures: tiny randomly initialised Llama models with a word-level tokenizer.

They are real transformers models (so cache, masks and positions behave as in production) but
small enough that a whole benchmark run takes well under a second.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# `make test` runs the suite on every core at once (pytest-xdist), each worker with its share of
# torch threads; the tests that read the machine's load or race a signal run after, alone.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // WORKERS))
SERIAL_FILES = {"test_interference.py", "test_launchers.py"}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SERIAL_FILES or item.get_closest_marker("server"):
            item.add_marker(pytest.mark.serial)


ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
WORDS = (
    "the a an of to in and is it that for on with as was at by be this from or are "
    "write function python code list return def sum number two three four five answer "
    "translate german english text story poem sea short make rhyme now more about what "
    "how why when who please explain step first then result total"
).split()


def tiny_tokenizer():
    """128 ids: the chat specials, WORDS, digits and punctuation, then filler words."""
    from bench.tools.gpu_check import word_tokenizer

    return word_tokenizer(WORDS + [str(d) for d in range(10)] + list(".,:;?!()=+-*/'\"_"), 128)


def tiny_llama(seed: int, vocab: int = 128, layers: int = 2, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    return LlamaForCausalLM(cfg).eval()


def save_with_tokenizer(model, path: Path) -> Path:
    """A model directory as the suite loads it: the model's files and the tiny tokenizer."""
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def save_tiny(path: Path, seed: int, layers: int = 2, vocab: int = 128) -> Path:
    return save_with_tokenizer(tiny_llama(seed, vocab=vocab, layers=layers), path)


@pytest.fixture(scope="module", params=["hf", "lean"])
def target(request):
    """The tiny target (tiny_llama(0)) on each engine: every method must be exact against its
    own engine. A module needing another target defines its own `target`."""
    from engines.load import wrap

    return wrap(tiny_llama(0), request.param)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny-model tests: on a shared 2-core machine a second
    thread only waits (up to 50× slower). Use with pytest.mark.usefixtures("one_thread")."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("target"), seed=0)


@pytest.fixture(scope="session")
def tiny_bf16_dir(tmp_path_factory) -> Path:
    """The tiny target with its weights rounded to bfloat16 and saved so: a 16-bit checkpoint
    (model.weights=bfloat16 runs it as it is; transformers in float32 widens it exactly)."""
    return save_with_tokenizer(tiny_llama(0).to(torch.bfloat16), tmp_path_factory.mktemp("bf16"))


@pytest.fixture(scope="session")
def cut_draft_dir(tiny_target_dir, tmp_path_factory):
    """The tiny target's first layer alone: a draft that agrees with the target in part."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_target_dir)
    model.model.layers = model.model.layers[:1]
    model.config.num_hidden_layers = 1
    return save_with_tokenizer(model, tmp_path_factory.mktemp("cut_draft"))


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("draft"), seed=1, layers=1)


def near_llama(scale: float = 0.1, seed: int = 5):
    """The tiny target (tiny_llama(0)) with every weight perturbed by `scale` × its std: a draft
    that agrees with the target on about two thirds of greedy tokens, so accepts, full rounds
    and rejections part-way down all happen (a random draft accepts almost nothing)."""
    from bench.tools.gpu_check import perturbed

    return perturbed(tiny_llama(0), scale, seed)


@pytest.fixture(scope="session")
def near_draft_dir(tmp_path_factory) -> Path:
    return save_with_tokenizer(near_llama(), tmp_path_factory.mktemp("near"))


def compose(overrides: list[str]):
    """A composed run config, as `python -m bench <overrides>` would build it."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from bench.run.config import register

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hcompose("config", overrides=overrides)


@pytest.fixture(scope="session")
def env(tmp_path_factory, tiny_draft_dir):
    """The tiny target on both engine kinds the methods need, and real (random) drafters for
    each learned method: what helpers.build gives every method of conf/method/."""
    from helpers import random_heads, save_head

    from bench.tools.gpu_check import random_drafter
    from drafters import medusa as heads_io
    from engines.load import wrap
    from groundfloor.paths import group_options

    lean, hf = wrap(tiny_llama(0), "lean"), wrap(tiny_llama(0), "hf")
    d = tmp_path_factory.mktemp("heads")
    heads_io.save(
        random_heads(lean.output_weight().shape[1], 4, 1),
        d / "medusa",
        "tiny",
        extra={"rank_accuracy": [[0.5, 0.2, 0.1]] * 4},
    )
    out = {
        "lean": lean,
        "hf": hf,
        "medusa": d / "medusa",
        "draft": tiny_draft_dir,
        "eagle": save_head(lean, "eagle", d / "eagle"),
        "eagle3": save_head(lean, "eagle3", d / "eagle3"),
    }
    # the four above as the suite's tests were tuned on; every other drafter of conf/drafter/
    # from the function its YAML names in `_test.random` (docs/recipes.md: a learned drafter)
    for name in group_options("drafter"):
        if name not in out:
            out[name] = random_drafter(name, tiny_llama(0), d / name)
    return out
