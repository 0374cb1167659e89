"""An EAGLE head's drafting step with its decoder layer as one native call.

A head step drafts for a few rows at a time: its products read little, and in torch the step is
some thirty small ops (seven projections, rotary, the mask, attention, norms, SiLU), most of its
time Python and dispatch between them. Where the head's layer runs int8 on the native kernels
(drafters.weights: `drafter_weights` int8, or auto where it picks int8), the layer after its
input is engines/kernels/layer.h's `attend_mlp_`, the target's own layer code (the same products,
rotary, attention over the head's cache in place and SiLU·mul), q/k/v reading the head's input:

    eagle   x = a = fc([emb; f])                                  attend_mlp_(x, a)
    eagle3  x = f,  a = [input_norm(emb); hidden_norm(f)]         attend_mlp_(x, a)

fc, the norms before the layer and the logits stay one torch call each. The numbers are the torch
step's up to float rounding (the native norm, rotary and attention round as the target's lean
forward does): it changes which tokens are drafted only at near-ties, never what is accepted.
q, k and v (and gate, up) are fused by concatenating their int8 rows once; the separate
projections then read views of the fused tensors, so the head holds its weights once.
SPECSWEEP_LAYER_CALL=0 keeps the torch step (to compare the two).
"""

from __future__ import annotations

import torch

from engines import hugepages, native
from engines.formats import NATIVE, Linear
from engines.lean import Rotary, check_supported


def _parts(lin: Linear) -> list[torch.Tensor]:
    """The tensors a native projection holds, as engines/kernels/layer.h's `project` reads them
    (without the row count of repacked weights)."""
    if native.repacked(lin.kernel):
        return [lin.packed]
    return [lin.qweight, lin.scales]


def _fuse(lins: list[Linear]) -> list[torch.Tensor] | None:
    """One projection of `lins`' rows stacked (their shared input), as `project` takes it. None
    where they cannot be stacked. _share then makes each Linear's tensors views of it."""
    tile = native.kernels()[0].TILE
    rows = sum(x.out_features for x in lins)
    if native.repacked(lins[0].kernel) and any(x.out_features % tile for x in lins):
        return None  # a part's last tile is padded: the parts' tiles do not stack
    fused = [torch.cat(ts) for ts in zip(*[_parts(x) for x in lins])]
    return fused + [torch.tensor(rows)] if native.repacked(lins[0].kernel) else fused


def _share(lins: list[Linear], fused: list[torch.Tensor] | None) -> None:
    """Each Linear's tensors become views of the fused ones (the head holds its weights once)."""
    if fused is None:
        return
    tile = native.kernels()[0].TILE
    at = 0
    for lin in lins:
        names = ["packed"] if native.repacked(lin.kernel) else ["qweight", "scales"]
        span = lin.out_features // tile if native.repacked(lin.kernel) else lin.out_features
        for name, whole in zip(names, fused):
            setattr(lin, name, whole[at : at + span])
        at += span


class NativeStep:
    """The head's layer (drafters.eagle.Layer, its projections int8 on one native kernel, no
    biases) as one native call; see the module doc."""

    def __init__(self, head, mod):
        layer, cfg = head.layer, head.config
        attn, mlp = layer.self_attn, layer.mlp
        self.mod, self.kind = mod, head.kind
        self.nh, self.nkv, self.hd = attn.nh, attn.nkv, attn.hd
        self.eps = float(cfg.rms_norm_eps)
        self.family = native.family(attn.q_proj.kernel)
        qkv, gu = [attn.q_proj, attn.k_proj, attn.v_proj], [mlp.gate_proj, mlp.up_proj]
        self.wqkv, self.wgu = _fuse(qkv), _fuse(gu)
        self.wo = _parts(attn.o_proj) + self._rows(attn.o_proj)
        self.wd = _parts(mlp.down_proj) + self._rows(mlp.down_proj)
        # a drafting step reads all of these cold after each target forward: 2 MB pages
        # (engines.hugepages), before the projections become views of the fused tensors
        out = head.lm_head if head.kind == "eagle3" else getattr(head.vocab, "linear", None)
        rest = [t for m in (head.fc, out) if m is not None for t in (*m.buffers(), *m.parameters())]
        self.placed = hugepages.place(
            [*(self.wqkv or []), *(self.wgu or []), *self.wo, *self.wd, *rest]
        )
        _share(qkv, self.wqkv)
        _share(gu, self.wgu)
        self.norm_post = layer.post_attention_layernorm.weight.detach().float().contiguous()
        if head.kind == "eagle3":
            self.norm_emb = layer.input_layernorm.weight.detach().float().contiguous()
            self.norm_feat = layer.hidden_norm.weight.detach().float().contiguous()
        self.rotary = Rotary(cfg, "cpu")

    @staticmethod
    def _rows(lin: Linear) -> list[torch.Tensor]:
        return [torch.tensor(lin.out_features)] if native.repacked(lin.kernel) else []

    @property
    def ready(self) -> bool:
        return self.wqkv is not None and self.wgu is not None

    def __call__(self, head, feat, ids, positions, visible, cache, keep: int = 0) -> torch.Tensor:
        """feat (n, H) features, ids (n,) tokens, positions (n,); visible (n, cached + n) bool or
        None (causal); cache: drafters.headcache.HeadCache, its n new entries written in place;
        keep: only the last `keep` rows' outputs are computed (0: all; the others' keys and
        values are still cached). → the head's outputs (n, H), rows before the kept ones
        meaningless."""
        mod, n = self.mod, feat.shape[0]
        emb = torch.nn.functional.embedding(ids, head.embed).float()
        if self.kind == "eagle":
            x = head.fc(torch.cat([emb, feat], -1)).contiguous()
            a = x  # q, k, v read x before the layer adds to it
        else:
            x = feat.float().contiguous().clone()
            a = torch.cat(
                [
                    mod.rms_norm(emb, self.norm_emb, self.eps),
                    mod.rms_norm(x, self.norm_feat, self.eps),
                ],
                -1,
            )
        cos, sin = self.rotary.tables(int(positions.max()) + 1)
        start = len(cache)
        kc, vc = cache.reserve(n, self.nkv, self.hd, x.dtype)
        mod.attend_mlp_(
            x,
            a,
            self.norm_post,
            self.wqkv,
            self.wo,
            self.wgu,
            self.wd,
            kc,
            vc,
            start,
            cos[positions],
            sin[positions],
            visible,
            self.nh,
            self.nkv,
            self.hd,
            self.eps,
            self.family,
            keep,
        )
        cache.n += n
        return x


def build(head) -> NativeStep | None:
    """The head's native step, or None where its layer cannot take it (float layers, a bias, a
    rotary kind the lean engine lacks, no native kernels, SPECSWEEP_LAYER_CALL=0)."""
    mod = native.kernels()[0]
    if mod is None or not native.layer_call():
        return None
    attn, mlp = head.layer.self_attn, head.layer.mlp
    lins = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj]
    lins += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    if not all(isinstance(x, Linear) and x.kernel in NATIVE and x.fmt == "int8" for x in lins):
        return None
    if len({x.kernel for x in lins}) != 1 or any(x.bias is not None for x in lins):
        return None
    try:
        check_supported(head.config)
    except ValueError:
        return None
    step = NativeStep(head, mod)
    return step if step.ready else None
