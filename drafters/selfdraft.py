"""The target's own 4-bit copy as its draft model (ML-SpecQD, QSpec): `method=draft
model.draft=self:q4_1` or `self:int4`, for a target at 16 bits on the lean engine.

    self:q4_1   the embedded GGUF's Q4_1 blocks as the file stores them (native_q8a, its Q8_0
                output layer): the weights the 16-bit target was rounded from, so the draft is
                the target up to bfloat16 rounding. An upper bound on what a 4-bit copy of a
                16-bit model accepts, not an estimate of it.
    self:int4   the 16-bit target's own weights quantized here, symmetric in groups of 32 as
                llama.cpp's Q4_0 (d = the group's value of largest magnitude / −8, rounded to
                float16; q = round(w/d) + 8 clamped to 0..15; w ≈ d·(q − 8)), the output layer
                int8 per row, on the int8-activation kernels. A second 4-bit grid over the same
                weights with a rounding error of its own: nearer to a real 4-bit copy of a
                16-bit model, still optimistic (the 16-bit weights here are themselves a 4-bit
                file's values, which a coarser grid meets more often than a real model's).
Both keep their own KV cache and run the same decode loop as any draft model (methods/draft.py).
With a draft vocabulary (method.draft_vocab: an EAGLE-3 head's d2t, the ids it drafts) the
output layer keeps only those rows, the draft's largest product cut to their share (8,192 of
49,152 rows for the shipped head); the draft then proposes only those ids.
"""

from __future__ import annotations

import torch

from engines import bf16file, build, gguf, native
from engines.gguf import GROUP, Q4_1
from engines.lean import LeanEngine
from engines.load import Source
from groundfloor.errors import UserError

KINDS = ("q4_1", "int4")
PREFIX = "self:"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def kind_of(spec) -> str | None:
    """ "q4_1" or "int4" for a model.draft of self:KIND, None for any other draft; one error line
    for an unknown KIND."""
    s = str(spec)
    if not s.startswith(PREFIX):
        return None
    kind = s[len(PREFIX) :]
    if kind not in KINDS:
        raise UserError(
            f"model.draft={s!r} is not valid; choose one of: "
            f"{', '.join(PREFIX + k for k in KINDS)}, or a draft model's id or directory"
        )
    return kind


def symmetric_q4(w: torch.Tensor):
    """w (out, in) as symmetric 4-bit groups of 32 (the module docstring's rule), in GGUF Q4_1's
    form (q ∈ 0..15, d, m = −8·d): what the int4 kernels run."""
    o, i = w.shape
    g = w.float().view(o, i // GROUP, GROUP)
    peak = g.gather(-1, g.abs().argmax(-1, keepdim=True)).squeeze(-1)
    d = (peak / -8).to(torch.float16).float()
    inv = torch.where(d != 0, 1 / d, torch.zeros_like(d))
    q = (torch.round(g * inv[..., None]) + 8).clamp(0, 15).to(torch.uint8)
    return Q4_1(q.view(o, i), d, -8 * d)


def load_engine(kind: str, target, model_cfg, device, d2t: torch.Tensor | None = None):
    """(draft engine, what it is in words) for self:`kind` beside the running `target`; with
    `d2t` (draft vocabulary → target ids) its output layer keeps those rows only."""
    import copy

    if target.name != "lean":
        raise UserError(f"model.draft=self:{kind} needs engine=lean (the draft runs our kernels)")
    source = Source(str(model_cfg.get("target")))
    tensors, what = stored_tensors(kind, target, source)
    kernel = "native_q8a" if native.integer_simd() else "native"
    what, config = f"{what}, {kernel}", source.config
    if d2t is not None:  # the output layer's rows of the draft vocabulary only
        head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"])
        rows = head.rows(d2t) if isinstance(head, (gguf.Q4_1, gguf.Q8_0)) else head[d2t]
        tensors = {**tensors, "lm_head.weight": rows}
        config = copy.deepcopy(config)
        config.tie_word_embeddings = False
        what += f", output layer reduced to a draft vocabulary of {len(d2t)}"
    model = build.build(config, tensors, "int4", torch.float32, device, kernel)
    return LeanEngine(model, "int4", what), what


def stored_tensors(kind: str, target, source) -> tuple[dict, str]:
    """The self-draft's tensors by transformers name (int4 projections as Q4_1 blocks), and
    what they are; one error line where the target does not allow `kind`."""
    if kind == "q4_1":
        if source.gguf is None:
            raise UserError(
                f"model.draft=self:q4_1 drafts with the GGUF file behind an embedded target; "
                f"{source.spec} has none: use model.draft=self:int4"
            )
        if target.weights == "int4":
            raise UserError(
                "model.draft=self:q4_1 drafts with the file the target already runs "
                "(model.weights=int4): use model.weights=bfloat16"
            )
        return gguf.read(source.gguf)[0], "the shipped Q4_1 file's blocks"
    if target.weights not in ("bfloat16", "float16", "float32"):
        raise UserError(
            f"model.draft=self:int4 quantizes a 16-bit target's weights; this target runs "
            f"model.weights={target.weights}: use model.weights=bfloat16"
        )
    if source.gguf is not None:
        tensors = bf16file.tensors(source.gguf)
    else:
        tensors = build.state_dict_of(str(source.local_dir()))
    tensors = {
        name: symmetric_q4(t) if name.split(".")[-2] in PROJECTIONS and t.dim() == 2 else t
        for name, t in tensors.items()
    }
    return tensors, f"the target's {target.weights} weights as symmetric int4 (groups of 32)"
