"""`engine=lean`: our own forward for the Llama family (Llama, SmolLM, Mistral, Qwen2).

In the shape of gpt-fast's model.py: fused QKV and gate/up projections, a KV cache preallocated
for the turn (engines.cache.StaticCache), rotary tables computed once, SDPA with an explicit
mask (trees), hidden states of any requested layers from the same pass. Its point is the weight
format and kernel of every projection (engines.formats: float32, bfloat16, int8, int4).

Per layer, x (B, n, H) in the activation dtype, cache positions [0, s) valid:
    h = rmsnorm(x) ;  q, k, v = split(h Wqkvᵀ [+ b]) ;  q, k = rope(q, k, positions)
    K[:, :, s:s+n], V[:, :, s:s+n] = k, v
    x = x + attn(q, K[:s+n], V[:s+n], mask) Woᵀ
    x = x + (silu(g) ⊙ u) Wdᵀ  where  g, u = split(rmsnorm(x) Wguᵀ)
then logits = rmsnorm(x) Woutᵀ. The norms and rotary follow transformers' Llama numerics (norm in
float32, cast back before the weight; cos/sin in float32 cast to the activation dtype), so in
float32 the logits match engine=hf to rounding (tests/test_engines.py). On a CPU in float32 with
the native kernels (batch 1), the norms, rotary, attention (each row over its visible keys in
position order) and SiLU·mul are engines/kernels/ ops, and where every projection is on one
native kernel the whole forward is one call (LeanModel.native_stack): a row's logits are then
the same bits alone or in any tree, on every build.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from engines import hugepages, native
from engines.base import Engine, Out
from engines.cache import StaticCache
from engines.formats import NATIVE, Linear

SUPPORTED = ("llama", "mistral", "qwen2")
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op; the same math as below
        return F.rms_norm(x, weight.shape, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin, with rotate_half(x) = [−x₂, x₁] written as roll(x)·[−1, 1]
    folded into the table: the same products and sums, in four ops instead of eight."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


def check_supported(config) -> None:
    """Raise ValueError naming engine=hf for an architecture the lean forward does not cover."""
    mt = getattr(config, "model_type", None)
    if mt not in SUPPORTED:
        raise ValueError(
            f"engine=lean supports {', '.join(SUPPORTED)} models, not "
            f"model_type={mt!r}; use engine=hf"
        )
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = (
        rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    )
    if kind not in STATIC_ROPE:
        raise ValueError(
            f"engine=lean supports rope types {', '.join(STATIC_ROPE)}, not {kind!r}; use engine=hf"
        )
    if getattr(config, "mlp_bias", False) or getattr(config, "hidden_act", "silu") != "silu":
        raise ValueError("engine=lean needs a bias-free SiLU MLP; use engine=hf")


class Rotary:
    """cos/sin tables (positions, head_dim) in float32, built once and extended on demand; sin
    carries rotate_half's sign (−1 on the first half), see `rope`."""

    def __init__(self, config, device):
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        rot = LlamaRotaryEmbedding(config=config)
        self.inv_freq = rot.inv_freq.float().to(device)
        self.scale = float(getattr(rot, "attention_scaling", 1.0))
        self.cos = self.sin = torch.empty(0, device=device)

    def tables(self, n: int):
        if self.cos.shape[0] < n:
            t = torch.arange(max(n, 2 * self.cos.shape[0], 1024), device=self.inv_freq.device)
            freqs = torch.outer(t.float(), self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            half = freqs.shape[-1]
            sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(emb.device)
            self.cos, self.sin = emb.cos() * self.scale, emb.sin() * self.scale * sign
        return self.cos, self.sin


class Block(nn.Module):
    def __init__(
        self,
        wqkv: Linear,
        wo: Linear,
        wgu: Linear,
        wd: Linear,
        norm_in,
        norm_post,
        heads: int,
        kv_heads: int,
        head_dim: int,
        eps: float,
    ):
        super().__init__()
        self.wqkv, self.wo, self.wgu, self.wd = wqkv, wo, wgu, wd
        self.register_buffer("norm_in", norm_in, persistent=False)
        self.register_buffer("norm_post", norm_post, persistent=False)
        self.nh, self.nkv, self.hd, self.eps = heads, kv_heads, head_dim, eps
        self._layer_args = None  # engines.native's layer_ arguments, built on first use
        self._family = None  # with them, the kernel family of its projections (native.FAMILIES)

    def forward(self, x, cos, sin, kc, vc, start: int, mask):
        """x (B, n, H); cos/sin (B, n, hd); kc/vc (B, kv, cap, hd) this layer's cache;
        mask (B | 1, 1, n, start + n) bool or None (causal)."""
        nat = native_ops(x)
        if nat is not None:
            return self.forward_native(nat, x, cos, sin, kc, vc, start, mask)
        B, n, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qkv = self.wqkv(rms_norm(x, self.norm_in, self.eps))
        cos, sin = cos[:, :, None], sin[:, :, None]
        qk = rope(qkv[..., : (nh + nkv) * hd].view(B, n, nh + nkv, hd), cos, sin)
        q = qk[:, :, :nh].transpose(1, 2)  # q and k rotated together: (B, n, nh + nkv, hd)
        k = qk[:, :, nh:].transpose(1, 2)
        v = qkv[..., (nh + nkv) * hd :].view(B, n, nkv, hd).transpose(1, 2)
        kc[:, :, start : start + n] = k
        vc[:, :, start : start + n] = v
        o = F.scaled_dot_product_attention(
            q,
            kc[:, :, : start + n].to(q.dtype),
            vc[:, :, : start + n].to(q.dtype),
            attn_mask=mask,
            enable_gqa=self.nh != self.nkv,
        )
        x = x + self.wo(o.transpose(1, 2).reshape(B, n, self.nh * self.hd))
        g, u = self.wgu(rms_norm(x, self.norm_post, self.eps)).chunk(2, dim=-1)
        return x + self.wd(F.silu(g) * u)

    def native_weights(self) -> list:
        """Each projection's tensors as engines.native's layer_ takes them ({nib, scale, offset}
        for int4 blocks, {q, scale} for int8 rows), or [] when a projection is not on the native
        kernels or has a bias, or SPECSWEEP_LAYER_CALL=0 (then the layer runs op by op)."""
        if self._layer_args is None:
            lins = (self.wqkv, self.wo, self.wgu, self.wd)
            kinds = {x.kernel for x in lins}
            ok = native.layer_call() and len(kinds) == 1 and kinds <= set(NATIVE)
            ok = ok and all(x.bias is None for x in lins)
            self._family = native.family(self.wqkv.kernel) if ok else None
            self._layer_args = [self.tensors(x) for x in lins] if ok else []
        return self._layer_args

    @staticmethod
    def tensors(lin) -> list:
        """A native Linear's tensors as engines.native's layer_ and Stack take them."""
        if native.repacked(lin.kernel):
            return [lin.packed, torch.tensor(lin.out_features)]
        return [lin.nib, lin.scale, lin.offset] if lin.fmt == "int4" else [lin.qweight, lin.scales]

    def forward_native(self, nat, x, cos, sin, kc, vc, start: int, mask):
        """The same layer with engines.native's per-row norm, rotary, attention and SiLU·mul
        (CPU, float32, batch 1): one call each instead of chains of small torch ops, each row's
        numbers independent of the other rows (engines/kernels/attention.h); x is updated in
        place. With every
        projection on the native kernels the whole layer is one call (`layer_`: these ops in
        this order, the same numbers, without the Python between them)."""
        nh, nkv, hd = self.nh, self.nkv, self.hd
        weights = self.native_weights()
        if weights:
            args = (kc, vc, start, cos[0], sin[0], mask, nh, nkv, hd, self.eps, self._family)
            nat.layer_(x[0], self.norm_in, self.norm_post, *weights, *args)
            return x
        n = x.shape[1]
        xs = x[0]  # (n, H), the residual stream
        qkv = self.wqkv(nat.rms_norm(xs, self.norm_in, self.eps))  # (n, (nh + 2 nkv) hd)
        nat.rope_(qkv, nh + nkv, hd, cos[0], sin[0])
        kc[0, :, start : start + n] = (
            qkv[:, nh * hd : (nh + nkv) * hd].view(n, nkv, hd).transpose(0, 1)
        )
        vc[0, :, start : start + n] = qkv[:, (nh + nkv) * hd :].view(n, nkv, hd).transpose(0, 1)
        o = nat.attention(qkv, kc[0], vc[0], start, mask, nh, nkv, hd)  # (n, nh·hd)
        h = nat.add_rms_norm_(xs, self.wo(o), self.norm_post, self.eps)
        xs.add_(self.wd(nat.silu_mul(self.wgu(h))))
        return x


def native_ops(x: torch.Tensor):
    """engines.native's module when x can take the per-row native path, else None."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.shape[0] != 1:
        return None
    return native.kernels()[0]


class LeanModel(nn.Module):
    def __init__(
        self,
        config,
        blocks: list[Block],
        embed: torch.Tensor,
        norm: torch.Tensor,
        output: Linear,
        dtype: torch.dtype,
        device,
    ):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(blocks)
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("norm", norm, persistent=False)
        self.output = output
        self.dtype = dtype
        self.eps = float(config.rms_norm_eps)
        self.rotary = Rotary(config, device)

    def native_stack(self):
        """engines.native's Stack for this model (built once), or None: the one-call forward
        runs where every layer runs as one native call (Block.native_weights) in one family;
        the output layer joins it where it is on the same kernel without a bias."""
        if getattr(self, "_stack", False) is False:
            self._stack, self._stack_output = None, None
            weights = [b.native_weights() for b in self.layers]
            families = {b._family for b in self.layers}
            if all(weights) and len(families) == 1:
                out = self.output
                if out.kernel == self.layers[0].wqkv.kernel and out.bias is None:
                    self._stack_output = Block.tensors(out)
                b0 = self.layers[0]
                self._stack = native.kernels()[0].Stack(
                    [[b.norm_in, b.norm_post] for b in self.layers],
                    *[[w[j] for w in weights] for j in range(4)],
                    self.norm,
                    self._stack_output or [],
                    b0.nh,
                    b0.nkv,
                    b0.hd,
                    b0.eps,
                    b0._family,
                )
        return self._stack

    def forward(self, ids, k, v, start: int, cos, sin, mask, logits_to_keep: int, want: dict):
        """cos/sin (B, n, hd) for the positions of ids; want: {layer index 0..N: keys to
        return it under}; → (logits, {key: (B, n, H)})."""
        x = F.embedding(ids, self.embed).to(self.dtype)
        stack = self.native_stack() if native_ops(x) is not None else None
        if stack is not None:  # the whole forward in one call (engines/kernels/model.h)
            taps = sorted(want)
            out, tapped = stack.forward(
                x[0], k, v, start, cos[0], sin[0], mask, logits_to_keep, taps
            )
            hidden = {key: t[None] for i, t in zip(taps, tapped) for key in want[i]}
            if self._stack_output is None:  # the output layer is not on the native kernels
                out = self.output(out)
            return out[None], hidden
        hidden = {}
        for i, layer in enumerate(self.layers):
            for key in want.get(i, ()):
                hidden[key] = x.clone()  # layers may update x in place
            x = layer(x, cos, sin, k[i], v[i], start, mask)
        nat = native_ops(x)
        x = (
            nat.rms_norm(x, self.norm, self.eps)
            if nat is not None
            else rms_norm(x, self.norm, self.eps)
        )
        for key in want.get(len(self.layers), ()):
            hidden[key] = x
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.output(x), hidden


class LeanEngine(Engine):
    name = "lean"

    def __init__(self, model: LeanModel, weights: str, source: str):
        self.model = model
        self.config = model.config
        self.dtype = model.dtype
        self.device = model.embed.device
        self.weights = weights
        self.source = source  # where the weights came from (GGUF blocks, safetensors, ...)
        c = model.config
        self.kv_heads = int(c.num_key_value_heads)
        self.head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
        self.window = (
            getattr(c, "sliding_window", None) if getattr(c, "use_sliding_window", True) else None
        )
        # the KV cache's dtype (model.kv_dtype): the activations' unless asked; a bfloat16 cache
        # halves what a step reads of it, each key and value rounded once as it is written
        self.kv_dtype = model.dtype
        self.run = self.model  # the forward; compile() swaps in a compiled one
        self.compiled = False
        # the weights in 2 MB pages where the OS lends them: a step streams them all (same bits)
        self.hugepage_bytes = hugepages.place_module(model) if self.device.type == "cpu" else 0

    def new_cache(self, capacity: int, batch: int = 1) -> StaticCache:
        return StaticCache(
            self.num_layers,
            batch,
            self.kv_heads,
            max(capacity, 16),
            self.head_dim,
            self.kv_dtype,
            self.device,
        )

    def forward(
        self, ids, cache, positions=None, mask=None, logits_to_keep: int = 0, hidden=()
    ) -> Out:
        B, n = ids.shape
        start = cache.length
        self._check_window(start + n)
        cache.reserve(start + n)
        if positions is None:
            positions = torch.arange(start, start + n, device=ids.device).expand(B, n)
        if mask is None and n > 1:  # causal over the new tokens, every cached one visible
            mask = torch.ones(n, start + n, dtype=torch.bool, device=ids.device).tril(start)[None]
        if mask is not None:
            mask = mask[:, None]  # (B | 1, 1, n, start + n)
        want = self._taps(hidden)
        # a position never exceeds its cache slot (left padding and tree depths only lower
        # it), so start + n bounds the table without reading `positions` back from the device
        cos, sin = self.model.rotary.tables(start + n)
        cos = cos[positions].to(self.dtype)  # (B, n, hd)
        sin = sin[positions].to(self.dtype)
        logits, hs = self.run(ids, cache.k, cache.v, start, cos, sin, mask, logits_to_keep, want)
        cache.length = start + n
        return Out(logits, hs)

    def forward_seqs(
        self,
        ids: list[torch.Tensor],
        caches: list[StaticCache],
        positions: list | None = None,
        masks: list | None = None,
        logits_to_keep: int | list[int] = 0,
        hidden=(),
    ) -> list[Out]:
        """Several sequences in one forward, each as `forward` would run it alone: sequence b's
        tokens ids[b] (n_b,) appended to its own cache caches[b] (at slots [length, length +
        n_b)), at positions[b] (default: those slots), seeing masks[b] (n_b, length + n_b) bool
        (None: causal, every cached slot visible); logits for its last logits_to_keep (one
        count, or one per sequence; 0: all) rows. Where the one-call forward runs
        (engines/kernels/model.h) all the sequences' rows go through each product together;
        elsewhere each sequence runs its own forward. Either way a sequence's logits, taps and
        cache are the bits its own forward gives. → one Out per sequence."""
        B = len(ids)
        keeps = logits_to_keep if isinstance(logits_to_keep, list) else [logits_to_keep] * B
        positions, masks = positions or [None] * B, masks or [None] * B
        if not (len(caches) == len(keeps) == len(positions) == len(masks) == B):
            raise ValueError(
                f"forward_seqs: {B} sequences need a cache, positions, a mask and "
                f"a logits count each"
            )
        stack = self.model.native_stack() if self._native_rows() else None
        if stack is None:  # each sequence's own forward
            return [
                self.forward(
                    x[None],
                    c,
                    None if p is None else p[None],
                    None if m is None else m[None],
                    k,
                    hidden,
                )
                for x, c, p, m, k in zip(ids, caches, positions, masks, keeps)
            ]
        return self._forward_seqs_native(stack, ids, caches, positions, masks, keeps, hidden)

    def _taps(self, hidden) -> dict:
        """Layer index → the keys it was asked under (2 and −1 may name the same layer)."""
        want, N = {}, self.num_layers
        for l in hidden:
            want.setdefault(l if l >= 0 else N + 1 + l, []).append(l)
        return want

    def one_call_rows(self) -> bool:
        """Whether forward_seqs runs as one native call here (every sequence's rows through each
        product together, each sequence's attention over its own cache), rather than one
        forward per sequence."""
        return self._native_rows() and self.model.native_stack() is not None

    def _native_rows(self) -> bool:
        return (
            self.device.type == "cpu"
            and self.dtype == torch.float32
            and (native.kernels()[0] is not None)
        )

    def _forward_seqs_native(self, stack, ids, caches, positions, masks, keeps, hidden):
        """forward_seqs as one call of the model's Stack: every sequence's rows concatenated."""
        sizes, starts = [int(x.numel()) for x in ids], [c.length for c in caches]
        for c, n in zip(caches, sizes):
            self._check_window(c.length + n)
            c.reserve(c.length + n)
        rows = [0] + torch.tensor(sizes).cumsum(0).tolist()
        m = self.model
        x = F.embedding(torch.cat(ids), m.embed).to(self.dtype)
        cos, sin = m.rotary.tables(max(s + n for s, n in zip(starts, sizes)))
        pos = torch.cat([
            torch.arange(s, s + n, device=self.device) if p is None else p
            for s, n, p in zip(starts, sizes, positions)
        ])  # fmt: skip
        empty, want = torch.empty(0, dtype=torch.bool), self._taps(hidden)
        taps = sorted(want)
        out, tapped = stack.forward_seqs(
            x, [c.k for c in caches], [c.v for c in caches], rows, starts,
            cos[pos].to(self.dtype), sin[pos].to(self.dtype),
            [empty if mk is None else mk for mk in masks], keeps, taps,
        )  # fmt: skip
        if m._stack_output is None:  # the output layer is not on the native kernels
            out = m.output(out)
        logits = out.split([min(k, n) if k else n for k, n in zip(keeps, sizes)])
        for c, n in zip(caches, sizes):
            c.length += n
        return [
            Out(logits[b][None], {key: t[rows[b] : rows[b + 1]][None]
                                  for i, t in zip(taps, tapped) for key in want[i]})
            for b in range(len(ids))
        ]  # fmt: skip

    def _check_window(self, end: int) -> None:
        if self.window and end > self.window:
            raise ValueError(
                f"engine=lean does not implement sliding-window attention past "
                f"{self.window} positions; use engine=hf"
            )

    def compile(self) -> None:
        """torch.compile the forward (dynamic token count and cache length; CUDA graphs on a
        GPU). Graphs are built on first use of each shape family, which the runner's warm-up
        does outside the clock; `recompiles()` counts graphs built since, so a timed turn that
        compiled can be refused."""
        mode = "reduce-overhead" if self.device.type == "cuda" else None
        if mode:
            count_cuda_graphs()
        self.run = torch.compile(self.model, dynamic=True, mode=mode)
        self.compiled = True

    @staticmethod
    def graphs() -> dict:
        """Graphs built so far in this process: torch._dynamo's compiled graphs, and the CUDA
        graphs recorded (reduce-overhead records one per new shape, which a cache slice that
        grows every step could make every step)."""
        from torch._dynamo.utils import counters

        return {"dynamo": int(counters["stats"]["unique_graphs"]), "cuda_graphs": CAPTURES[0]}

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.embed

    def output_weight(self) -> torch.Tensor:
        if not hasattr(self, "_output_weight"):
            out = self.model.output
            if out.fmt in ("float32", "bfloat16", "float16") and out.kernel == "aten":
                self._output_weight = out.weight  # the stored tensor itself
            else:
                self._output_weight = out.dequantized().to(self.dtype)
        return self._output_weight

    def weight_bytes(self) -> int:
        n = sum(m.nbytes() for m in self.model.modules() if isinstance(m, Linear))
        n += self.model.embed.numel() * self.model.embed.element_size()
        n += sum(
            b.numel() * b.element_size()
            for blk in self.model.layers
            for b in (blk.norm_in, blk.norm_post)
        )
        return n + self.model.norm.numel() * self.model.norm.element_size()  # the final norm

    def step_weight_bytes(self) -> int:
        """Bytes one decoding step reads: every projection and the output layer, not the
        embedding table (one row is gathered)."""
        return sum(m.nbytes() for m in self.model.modules() if isinstance(m, Linear))

    def describe(self) -> dict:
        kernels = sorted(
            {f"{m.fmt}:{m.kernel}" for m in self.model.modules() if isinstance(m, Linear)}
        )
        return {
            **super().describe(),
            "kernels": kernels,
            "source": self.source,
            "output_layer": self.model.output.fmt,
            "compiled": self.compiled,
            "hugepages_mb": round(self.hugepage_bytes / 2**20, 1),
        }


CAPTURES = [0]  # CUDA-graph recordings in this process (count_cuda_graphs)


def count_cuda_graphs() -> None:
    """Count every CUDA-graph recording from now on: torch's CUDAGraph.capture_begin, which
    torch.cuda.graph and inductor's CUDA-graph trees call, wrapped once per process."""
    cls = torch.cuda.graphs.CUDAGraph
    if getattr(cls.capture_begin, "counted", False):
        return
    original = cls.capture_begin

    def capture_begin(self, *args, **kwargs):
        CAPTURES[0] += 1
        return original(self, *args, **kwargs)

    capture_begin.counted = True
    cls.capture_begin = capture_begin
