"""`eagle`: an EAGLE head drafts a dynamic tree (EAGLE-2) that the target verifies in one forward.

The head (drafters.eagle) keeps its own KV cache in `state.aux`, covering positions whose
target feature is known (committed tokens except the last). Each round one grower (`draft`)
asks the method's draft-size policy (methods.sizing) at each step:
  1. whether to draft (`skip`: k=auto's plain round); the head consumes the features the last
     verify produced (root + accepted path) → the K best first tokens, K = min(top_k, nodes);
  2. at most `depth` − 1 times, which frontier nodes to expand (`deeper`: a fixed tree all, k=auto
     those whose children could raise expected tokens per second, none: stop): they run through
     the head in one tree-masked step, each proposes its K best children, scored by their path's
     cumulative draft log-probability, and the K best new nodes form the next frontier;
  3. how many of the best nodes form the tree (`size`: a fixed tree its total_tokens best by
     score, k=auto the n maximising (1 + Σ ŝ)/T(n), methods.auto.TreeChooser); a child never
     outscores its parent, so the choice is prefix-closed. A fixed k is EAGLE-2's round.
The target verifies the tree (methods.base.TreeMethod); greedy follows the argmax path, T > 0 the
tree rule with the candidates as point masses (lossless: the tree depends only on the draft).
The verify's features of the root and the accepted path join the head's pending input (also
over rounds `sam`'s automaton verified). `total_tokens: auto` with a fixed k: the node budget
from timed target forwards (methods.budget), re-chosen on the warm curve.
Knobs: heads (directory or Hub id; default model.eagle), k (= depth), top_k, total_tokens,
budget_ratio, draft_vocab (score only the N most frequent tokens, drafters.draftvocab; null: the
full vocabulary). `methods.eagle3` is the same round with an EAGLE-3 head.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import torch

from drafters import eagle as eagle_io
from drafters import weights
from drafters.headcache import HeadCache
from engines.base import tree_mask
from groundfloor.errors import UserError
from groundfloor.models import local_dir
from groundfloor.tree import TreeLayout
from methods import auto, budget, knobs, sizing
from methods.auto import Plan
from methods.base import TreeMethod, TreeProposal


@dataclass(frozen=True)
class EagleKnobs:  # defaults: conf/method/eagle.yaml and eagle3.yaml
    heads: str | None
    top_k: int
    total_tokens: int | str  # auto: from timed target forwards
    budget_ratio: float


class Eagle(TreeMethod):
    name = "eagle"
    kind = "eagle"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, EagleKnobs)
        ratio = kn.budget_ratio
        valid = "use a factor >= 1 (the verify forward may cost this × a one-token forward)"
        knobs.need(self, ratio >= 1, "budget_ratio", ratio, valid)
        draft_vocab = self.draft_vocab()
        self.head, self.head_cfg = self._load_head(kn.heads or ctx.model_cfg.get(self.kind), ctx)
        self.hidden_layers = tuple(self.head.target_layers)
        frequent = (self.head_cfg.get("specsweep") or {}).get("frequent_ids")
        vocab = self.head.restrict(frequent, draft_vocab)
        self.feat_dtype = ctx.dtype  # the head's activations (its layers may run int8)
        self.top_k = kn.top_k
        self.weights = self._head_weights(ctx)
        self.policy = self._sizes(kn, ctx)
        self.info = {
            "top_k": self.top_k,
            "draft_vocab": vocab,
            "drafter_weights": self.weights,
            "head_step": "native" if self.head.native is not None else "torch",
            "policy": self.policy.summary(),
        }

    def _sizes(self, kn, ctx):
        """The round's sizes: k=auto's TreeChooser (depth ≤ max_k, capped by our trained heads'
        held-out acceptance; nodes ≤ total_tokens), or EAGLE-2's fixed tree (depth k, top_k,
        total_tokens; auto: by budget_ratio on the engine's curve, until the run's warm one)."""
        k, total = ctx.k(self.cfg), kn.total_tokens
        if (isinstance(k, int) and k < 1) or self.top_k < 1:
            raise UserError(f"method {self.name}: k={k} and top_k={self.top_k} must be ≥ 1")
        return sizing.pick(self, lambda: self._adaptive(total), lambda k: self._fixed(k, kn, ctx))

    def _adaptive(self, total):
        prior = auto.trained_prior(self.head_dir)
        nodes = budget.MAX_NODES if total == "auto" else min(count(total), budget.MAX_NODES)
        return auto.TreeChooser(
            nodes, sizing.max_k(self), prior if isinstance(prior, list) else None
        )

    def _fixed(self, k, kn, ctx):
        depth = 6 if k is None else int(k)
        if kn.total_tokens != "auto":
            return auto.FixedTree(depth, self.top_k, count(kn.total_tokens))
        n, curve = budget.auto_tokens(ctx.target, kn.budget_ratio)  # the root rides along
        return auto.FixedTree(depth, self.top_k, max(n - 1, 1), kn.budget_ratio, curve)

    @property
    def depth(self) -> int:
        return self.policy.depth

    @property
    def total_tokens(self) -> int:
        return self.policy.max_nodes

    def _head_weights(self, ctx) -> str:
        """drafter_weights for the head: its layers (and draft-vocabulary rows) int8 where it
        chooses so, the layer then one native call (drafters.eagle_native)."""
        out = self.head.lm_head.weight if self.kind == "eagle3" else self.head.vocab.weight
        mode = weights.choose(ctx.drafter_weights, out, self.top_k, ctx.device)
        if mode == "int8":
            weights.quantize(self.head)
            if self.head.vocab is not None:
                self.head.vocab.quantize()
        self.head.use_native()
        return mode

    def _load_head(self, src, ctx):
        """method.heads (else the model's shipped head): a head of this method's kind."""
        if not src:
            raise UserError(
                f"method={self.name} needs a head: set method.heads=<dir or Hub id> "
                f"or model.{self.kind} (train one with `python -m train "
                f"drafter={self.kind}`)"
            )
        path = self.head_dir = local_dir(str(src), "method.heads")
        try:
            head, head_cfg = eagle_io.load(path, ctx.target, ctx.dtype)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(f"method.heads={str(src)!r}: {e}")
        if head.kind != self.kind:
            raise UserError(
                f"method.heads={str(src)!r} holds an {head.kind} head; use method={head.kind}"
            )
        return head, head_cfg

    def max_verify_width(self) -> int:
        return self.total_tokens + 1

    def static_bytes(self) -> int:
        return self.head.own_bytes()

    def state_bytes(self, state) -> int:
        return state.aux["head_cache"].nbytes() if "head_cache" in state.aux else 0

    # --- features ---
    # The target's tapped rows wait unfused in state.aux["pending"] (per round, one (n, H) tensor
    # per tapped layer) until the head next drafts: then they are joined and one fc call fuses
    # them all (EAGLE-3's 3H → H), so a round k=auto leaves plain runs no fc and copies no
    # earlier rows, and rows after a turn's last draft are never fused.
    def _tapped(self, hidden, rows) -> list[torch.Tensor]:
        """The tapped layers' rows `rows` (a list of verify rows, or a slice)."""
        return [hidden[l][0, rows].to(self.feat_dtype) for l in self.head.target_layers]

    def _pend(self, state, rows: list[torch.Tensor]) -> None:
        state.aux.setdefault("pending", []).append(rows)

    def _pending_features(self, state) -> torch.Tensor:
        rounds = state.aux.pop("pending")
        return self.head.fuse([torch.cat(layer) for layer in zip(*rounds)])

    def start(self, state) -> None:
        state.aux["head_cache"] = HeadCache()

    def prefill(self, state) -> torch.Tensor:
        out = self.target.forward(
            state.tokens[None], state.cache, logits_to_keep=1, hidden=tuple(self.head.target_layers)
        )
        state.aux["prefill_hidden"] = out.hidden
        return out.logits[0, -1]

    def draft_prefill(self, state, logits) -> None:  # drafting work: the prompt's tapped rows
        state.aux["pending"] = [self._tapped(state.aux.pop("prefill_hidden"), slice(None))]

    # --- drafting ---
    def _step(self, cache: HeadCache, feat, ids, positions, tree_allowed=None, keep: int = 0):
        """Run the head on n inputs after the cache; tree_allowed (n, t) marks which of the
        cache's last t entries (the tree) each input sees; None: causal over the inputs. keep:
        only the last `keep` outputs are read (0: all)."""
        visible = None
        if tree_allowed is not None:  # the tree's cached entries it is allowed, then itself
            n, dev = feat.shape[0], feat.device
            own = torch.cat([tree_allowed, torch.eye(n, dtype=torch.bool, device=dev)], 1)
            visible = tree_mask(own, len(cache) + n - own.shape[1])[0]  # (n, cached + n)
        return self.head.step(feat, ids, positions, visible, cache, keep)

    def _catch_up(self, state):
        """The head over the positions it has not seen (the pending features of the tokens
        accepted since its last step): its output at the last one, the root of this round's
        tree (1, H); the earlier ones only join its cache."""
        cache = state.aux["head_cache"]
        p0, n = len(cache), state.length
        feat = self._pending_features(state)
        pos = torch.arange(p0, n - 1, device=state.ids.device)
        return self._step(cache, feat, state.ids[p0 + 1 : n], pos, keep=1)[-1:]

    def _expand(self, cache, base: int, position: int, frontier, f_par, f_tok, f_feat, chain):
        """One depth of the tree: the head over the frontier's nodes (pool indices `frontier`,
        parents `f_par`, draft tokens `f_tok`, features `f_feat`), each seeing the committed
        cache and its own ancestors' rows; `chain` (pool node → its and its ancestors' cache
        rows) gains the frontier. Returns the head's outputs, one row per frontier node."""
        dev = f_feat.device
        t = len(cache) - base
        rows = [i for i, p in enumerate(f_par) for _ in chain[p]]
        cols = [r - base for p in f_par for r in chain[p]]
        tree_allowed = torch.zeros(len(frontier), t, dtype=torch.bool, device=dev)
        if rows:
            tree_allowed[rows, cols] = True
        pos = torch.full((len(frontier),), position, dtype=torch.long, device=dev)
        ids = torch.tensor(f_tok, device=dev)
        o = self._step(cache, f_feat, self.head.to_target(ids), pos, tree_allowed)
        for i, (node, p) in enumerate(zip(frontier, f_par)):
            chain[node] = chain[p] + [base + t + i]
        return o

    def draft(self, state) -> TreeProposal:
        """The round's tree, grown as the policy says (the module's steps 1-3). Every node's
        score and ŝ come from the draft alone; the pool's bookkeeping (a few nodes a depth) is
        plain Python, tensors only for the head."""
        policy, cache = self.policy, state.aux["head_cache"]
        if policy.skip():  # a plain round; the head reads the pending features next time
            return self.plain_proposal(state)
        n = state.length
        out = self._catch_up(state)
        base = len(cache)
        width = min(self.top_k, policy.max_nodes)  # a wider frontier adds no kept node
        pool = _Pool(width)
        values, ids = self._top(out[-1:], width)
        frontier = pool.grow(-1, values[0], ids[0], policy.lam(1))
        feats = out[-1:].expand(len(frontier), -1)
        chain = {-1: []}
        steps = 1
        for d in range(1, policy.depth):
            lam = policy.lam(d + 1)
            bound = [min(math.exp(pool.score[i]) * lam, pool.est[i]) for i in frontier]
            grow = policy.deeper(pool.ranked(policy.max_nodes), bound, steps)
            if not grow:
                break
            if grow < len(bound):  # expand only the frontier nodes whose children could pay
                pick = sorted(sorted(range(len(bound)), key=lambda i: -bound[i])[:grow])
                frontier, feats = [frontier[i] for i in pick], feats[pick]
            parents = [pool.parent[i] for i in frontier]
            tokens = [pool.token[i] for i in frontier]
            o = self._expand(cache, base, n - 2 + d, frontier, parents, tokens, feats, chain)
            steps += 1
            frontier, rows = pool.children(frontier, self._top(o, width), lam)
            feats = o[rows]
        cache.truncate(base)
        return self._best_nodes(pool, steps)

    def _top(self, o, k: int) -> tuple[list, list]:
        """The head's k best draft tokens after each row of `o`: (log-probabilities, ids), one
        list of k per row."""
        lp = torch.log_softmax(self.head.logits(o).float(), -1)
        top = lp.topk(min(k, lp.shape[-1]), dim=-1)
        return top.values.tolist(), top.indices.tolist()

    def _best_nodes(self, pool: "_Pool", steps: int) -> TreeProposal:
        """The proposal from the drafted pool: the n nodes of best ŝ, n the policy's size."""
        policy = self.policy
        # best ŝ first, ties by creation order: a parent (never below its child) comes first
        order = sorted(range(len(pool.est)), key=lambda i: -pool.est[i])[: policy.max_nodes]
        keep_n = policy.size([pool.est[i] for i in order], steps)
        policy.note(keep_n, steps)
        keep = sorted(order[:keep_n])
        index = {j: i for i, j in enumerate(keep)}
        parents = [index[pool.parent[j]] if pool.parent[j] >= 0 else -1 for j in keep]
        ids = torch.tensor([pool.token[j] for j in keep], dtype=torch.long)
        return TreeProposal(
            tokens=self.head.to_target(ids.to(self.head.embed.device)),
            layout=TreeLayout.from_parents(parents),
            steps=steps,
            plan=Plan(reach=[math.exp(pool.score[j]) for j in keep]),
        )

    def after_accept(self, state, proposal, nodes, logits, hidden) -> None:
        # features of the verify rows of the root and the accepted path (row i + 1 = node i),
        # after any the head has not consumed yet; a path along the first nodes is a slice
        rows = (
            slice(0, len(nodes) + 1)
            if nodes == list(range(len(nodes)))
            else [0] + [j + 1 for j in nodes]
        )
        self._pend(state, self._tapped(hidden, rows))


def count(total) -> int:
    """method.total_tokens as a node count: a positive integer (or one error line)."""
    try:
        n = int(total)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UserError(
            f"method.total_tokens={total!r} is not valid; give a positive integer or auto"
        )
    return n


def f32(x: float) -> float:
    """x rounded to float32: a path's score is summed as the head's float32 log-probabilities
    would be (one rounding a step), so scores order and tie as in float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


class _Pool:
    """A round's drafted nodes in creation order (parents before children): draft token, parent
    (−1: the root), cumulative log-probability and ŝ, the calibrated reach (never above the
    parent's; a fixed tree's is the path's probability)."""

    def __init__(self, k: int):
        self.k = k
        self.token: list[int] = []
        self.parent: list[int] = []
        self.score: list[float] = []
        self.est: list[float] = []

    def grow(self, parent: int, values: list, ids: list, lam: float) -> list[int]:
        """The K children of `parent` (its top tokens' log-probabilities and ids) → their
        pool indices."""
        first = len(self.token)
        base = self.score[parent] if parent >= 0 else 0.0
        cap = self.est[parent] if parent >= 0 else 1.0
        for v, t in zip(values, ids):
            s = f32(base + v)
            self.token.append(t)
            self.parent.append(parent)
            self.score.append(s)
            self.est.append(min(math.exp(s) * lam, cap))
        return list(range(first, len(self.token)))

    def children(self, frontier: list[int], top: tuple, lam: float) -> tuple[list, list]:
        """The frontier's children (`top`: each frontier row's K best) joined; → the next
        frontier (the K best new nodes by score, ties by creation order) and, for each, the
        row of its parent in `frontier`."""
        values, ids = top
        new = []
        for row, node in enumerate(frontier):
            new += [(i, row) for i in self.grow(node, values[row], ids[row], lam)]
        best = sorted(new, key=lambda x: -self.score[x[0]])[: self.k]
        return [i for i, _ in best], [row for _, row in best]

    def ranked(self, limit: int) -> list[float]:
        """ŝ of the `limit` best nodes, best first."""
        return sorted(self.est, reverse=True)[:limit]
