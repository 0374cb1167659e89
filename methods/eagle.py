"""`eagle`: an EAGLE head drafts a dynamic tree (EAGLE-2) that the target verifies in one forward.

The head (drafters.eagle) keeps its own KV cache in `state.aux`, covering positions whose
target feature is known (committed tokens except the last). Per round:
  1. the head consumes the features the last verify produced (root + accepted path) → the
     distribution of the first drafted token;
  2. expansion, `depth` − 1 times: the K = min(`top_k`, `total_tokens`) frontier nodes are run
     through the head in one tree-masked step; each proposes its K best children; a child's
     score is its path's cumulative draft log-probability; the K best new nodes form the next
     frontier (a wider one could not add a node to the kept tree);
  3. the `total_tokens` best-scored nodes of all drafted ones form the tree (a child never
     outscores its parent, so the choice is prefix-closed); the head's tree entries are dropped.
     With one node a depth (top_k or total_tokens 1) the tree is a chain, drafted without the
     tree's bookkeeping (`_chain`: the same tokens and head steps).
The target verifies the tree (methods.base.TreeMethod: methods.treeverify, groundfloor.tree); greedy
follows the argmax path, T > 0 uses the tree rule with the candidates as point masses (lossless:
the tree depends only on the draft). The verify forward's features of the root and the accepted
path join the head's pending input; they accumulate over rounds another drafter verified
(`sam` with `fallback: eagle`).
`total_tokens: auto` picks the node budget from timed target forwards (methods.budget).
Knobs: heads (directory or Hub id; default model.eagle), k (= depth), top_k, total_tokens,
budget_ratio, draft_vocab (eagle: score only the N most frequent tokens, drafters.draftvocab; needs
the frequency list our training stores; null: the full vocabulary). `methods.eagle3` is the
same round with an EAGLE-3 head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from drafters import eagle as eagle_io
from drafters import weights
from engines.base import tree_mask
from groundfloor.errors import UserError
from groundfloor.models import local_dir
from groundfloor.tree import TreeLayout
from methods import auto, budget, knobs
from methods.base import TreeMethod, TreeProposal


class HeadCache:
    """The head's KV cache: keys/values (1, kv_heads, n, head_dim), written in place into
    buffers that double when full (a round's drafted tokens are appended, its rejected ones
    truncated: no per-step concatenation of the whole cache)."""

    def __init__(self):
        self._k = self._v = None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def k(self):
        return None if self._k is None else self._k[..., : self.n, :]

    @property
    def v(self):
        return None if self._v is None else self._v[..., : self.n, :]

    def reserve(self, m: int, heads: int, dim: int, dtype) -> tuple:
        """Room for m more entries: the whole buffers (1, heads, capacity, dim), grown (doubled)
        where full; the caller writes entries n .. n + m − 1 and then advances n."""
        if self._k is None or self.n + m > self._k.shape[-2]:
            cap = max(2 * (self.n + m), 64)
            like = self._k if self._k is not None else torch.empty(0, dtype=dtype)
            bk, bv = like.new_empty((1, heads, cap, dim)), like.new_empty((1, heads, cap, dim))
            if self.n:
                bk[..., : self.n, :] = self._k[..., : self.n, :]
                bv[..., : self.n, :] = self._v[..., : self.n, :]
            self._k, self._v = bk, bv
        return self._k, self._v

    def append(self, k, v) -> None:
        m = k.shape[-2]
        bk, bv = self.reserve(m, k.shape[-3], k.shape[-1], k.dtype)
        bk[..., self.n : self.n + m, :] = k
        bv[..., self.n : self.n + m, :] = v
        self.n += m

    def truncate(self, n: int) -> None:
        self.n = min(self.n, n)

    def nbytes(self) -> int:
        """The buffers held (their capacity, not only the entries in use)."""
        return 0 if self._k is None else 2 * self._k.numel() * self._k.element_size()


@dataclass(frozen=True)
class EagleKnobs:  # defaults: conf/method/eagle.yaml and eagle3.yaml
    heads: str | None
    top_k: int
    total_tokens: int | str  # auto: from timed target forwards
    budget_ratio: float


class Eagle(TreeMethod):
    name = "eagle"
    kind = "eagle"
    policy = auto.TreeChooser  # k=auto: depth and nodes per round

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, EagleKnobs)
        ratio = kn.budget_ratio
        self.need(
            ratio >= 1,
            "budget_ratio",
            ratio,
            "use a factor >= 1 (the verify forward may cost this × a one-token forward)",
        )
        draft_vocab = self.draft_vocab()
        self.head, self.head_cfg = self._load_head(kn.heads or ctx.model_cfg.get(self.kind), ctx)
        self.hidden_layers = tuple(self.head.target_layers)
        frequent = (self.head_cfg.get("specsweep") or {}).get("frequent_ids")
        vocab = self.head.restrict(frequent, draft_vocab)
        self.feat_dtype = ctx.dtype  # the head's activations (its layers may run int8)
        k = ctx.k(cfg)
        if k == auto.AUTO:  # depth and node budget chosen per round (methods.auto)
            self.depth = self.max_k()
            # our trained heads' held-out acceptance caps the depth (TreeChooser); a head
            # without it (a published one) keeps max_k
            prior = auto.trained_prior(self.head_dir)
            self.use_auto(budget.MAX_NODES, self.depth, prior if isinstance(prior, list) else None)
        else:
            self.depth = 6 if k is None else int(k)
        self.top_k = kn.top_k
        self.weights = self._head_weights(ctx)
        if self.depth < 1 or self.top_k < 1:
            raise UserError(f"method {self.name}: k={k} and top_k={self.top_k} must be ≥ 1")
        self.budget_curve, self.ratio, self.asked_depth = None, ratio, self.depth
        self.total_tokens = self._total_tokens(kn.total_tokens, ctx)
        self.info = {
            "depth": self.depth,
            "top_k": self.top_k,
            "total_tokens": self.total_tokens,
            "draft_vocab": vocab,
            "verify_cost_ms": None
            if self.budget_curve is None
            else {n: round(c * 1e3, 2) for n, c in self.budget_curve.items()},
            "asked_depth": self.asked_depth,
            "drafter_weights": self.weights,
            "head_step": "native" if self.head.native is not None else "torch",
        }
        if self.auto is not None:
            self.auto.max_nodes = min(self.auto.max_nodes, self.total_tokens)
            self.info.update(k="auto", depth=None, total_tokens=None, max_depth=self.depth)
        else:
            self._fit_depth()

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

    def _total_tokens(self, total, ctx) -> int:
        """method.total_tokens checked: with k=auto the most nodes a round may choose (auto:
        every node k=auto may pick); with a fixed k the nodes verified per round (auto: from
        the engine's curve and budget_ratio, provisional until calibrate() reads the warm one)."""
        if self.auto is not None:
            total = self.auto.max_nodes if total == "auto" else total
        elif total == "auto":
            n, self.budget_curve = budget.auto_tokens(ctx.target, self.ratio)
            total = max(n - 1, 1)  # the root rides in the same forward
        try:
            n = int(total)
        except (TypeError, ValueError):
            n = 0
        if n < 1:
            raise UserError(
                f"method.total_tokens={total!r} is not valid; give a positive integer or auto"
            )
        return n

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

    def _fit_depth(self) -> None:
        """No deeper than the budget can verify: a path of d nodes needs d of the budget."""
        self.depth = min(self.asked_depth, self.total_tokens)
        self.info.update(depth=self.depth, total_tokens=self.total_tokens)

    def calibrate(self, costs: dict, drafting: tuple = (0.0, 0.0, 0.0)) -> bool:
        if self.auto is not None:
            self.auto.calibrate(costs, *drafting)
            self.auto.max_nodes = min(self.auto.max_nodes, self.total_tokens)
            self.auto.reset()
            self.record_auto()
            self.info["verify_cost_ms"] = {n: round(c * 1e3, 2) for n, c in costs.items()}
            return False
        if self.budget_curve is None:  # a fixed total_tokens
            return False
        old = (self.total_tokens, self.depth)
        self.budget_curve = costs
        self.total_tokens = max(budget.choose(costs, self.ratio) - 1, 1)
        self.info["verify_cost_ms"] = {n: round(c * 1e3, 2) for n, c in costs.items()}
        self._fit_depth()
        return (self.total_tokens, self.depth) != old

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

    def _expand(
        self,
        cache: HeadCache,
        base: int,
        position: int,
        frontier: list[int],
        f_par: list[int],
        f_tok,
        f_feat,
        chain: dict,
    ):
        """One depth of the tree: the head over the frontier's nodes (pool indices `frontier`,
        parents `f_par`, draft tokens `f_tok`: a tensor or a list, features `f_feat`), each
        seeing the committed cache and its own ancestors' rows; `chain` (pool node → its and its
        ancestors' cache rows) gains the frontier. Returns the head's outputs, one row per
        frontier node."""
        dev = f_feat.device
        t = len(cache) - base
        rows = [i for i, p in enumerate(f_par) for _ in chain[p]]
        cols = [r - base for p in f_par for r in chain[p]]
        tree_allowed = torch.zeros(len(frontier), t, dtype=torch.bool, device=dev)
        if rows:
            tree_allowed[rows, cols] = True
        pos = torch.full((len(frontier),), position, dtype=torch.long, device=dev)
        ids = f_tok if torch.is_tensor(f_tok) else torch.tensor(f_tok, device=dev)
        o = self._step(cache, f_feat, self.head.to_target(ids), pos, tree_allowed)
        for i, (node, p) in enumerate(zip(frontier, f_par)):
            chain[node] = chain[p] + [base + t + i]
        return o

    def draft(self, state) -> TreeProposal:
        if self.auto is not None:
            return self.draft_auto(state)
        out = self._catch_up(state)
        base = len(state.aux["head_cache"])  # n − 1: committed positions
        if min(self.top_k, self.total_tokens) == 1:
            return self._chain(state, out[-1:], base)
        return self._tree(state, out[-1:], base)

    def _tree(self, state, root, base: int) -> TreeProposal:
        """A fixed-size tree: top_k children of each frontier node, the top_k best new nodes
        the next frontier, depth levels, the total_tokens best nodes kept. root: the head's
        output at the root (1, H)."""
        head, cache = self.head, state.aux["head_cache"]
        dev = state.ids.device
        n = state.length
        lp = torch.log_softmax(head.logits(root).float(), -1)[0]
        # a frontier wider than the budget adds nothing: the kept nodes are the budget's best,
        # prefix-closed, so each depth's kept nodes are among its best `total_tokens`
        K = min(self.top_k, self.total_tokens, lp.numel())
        top = lp.topk(K)
        # the pool of drafted nodes, in creation order (parents before children)
        tok = [top.indices]
        par = [torch.full((K,), -1, dtype=torch.long, device=dev)]
        score = [top.values]
        frontier = torch.arange(K, device=dev)  # pool indices of the nodes to expand next
        f_tok, f_par, f_score = top.indices, [-1] * K, top.values  # their tokens, parents, scores
        f_feat = root[0].expand(K, -1)
        chain = {-1: []}  # expanded pool node → head-cache rows of it and its ancestors
        size = K
        for d in range(1, self.depth):
            o = self._expand(cache, base, n - 2 + d, frontier.tolist(), f_par, f_tok, f_feat, chain)
            lp = torch.log_softmax(head.logits(o).float(), -1)  # (F, Vd)
            ch = lp.topk(K, dim=-1)
            cand = (f_score[:, None] + ch.values).flatten()  # (F·K,)
            kids = ch.indices.flatten()
            tok.append(kids)
            par.append(frontier.repeat_interleave(K))
            score.append(cand)
            best = cand.topk(min(K, cand.numel())).indices
            f_tok, f_score, f_par = kids[best], cand[best], frontier[best // K].tolist()
            frontier = size + best
            f_feat = o[best // K]
            size += cand.numel()
        cache.truncate(base)
        all_tok, all_par, all_score = torch.cat(tok), torch.cat(par).tolist(), torch.cat(score)
        # best scores first, ties by creation order: a parent (created earlier, never scored
        # lower than its child) always precedes its children, so any prefix is a tree
        order = torch.sort(-all_score, stable=True).indices[: self.total_tokens]
        keep = sorted(order.tolist())
        index = {j: i for i, j in enumerate(keep)}
        parents = [index[all_par[j]] if all_par[j] >= 0 else -1 for j in keep]
        tokens = head.to_target(all_tok[keep])
        return TreeProposal(
            tokens=tokens, layout=TreeLayout.from_parents(parents), steps=self.depth
        )

    def _chain(self, state, o, base: int) -> TreeProposal:
        """top_k = 1 (or a budget of one node a depth): each depth's one node is the head's
        most likely token after its parent, so the tree is a chain, each node seeing the cache
        and the nodes before it (causal); the same tokens as the tree code's, without its
        bookkeeping. o: the head's output at the root (1, H)."""
        head, cache = self.head, state.aux["head_cache"]
        pos = state.length - 1  # the first node's position in the head's cache
        toks = [head.logits(o).argmax(-1)]
        for d in range(1, self.depth):  # depth ≤ total_tokens (_fit_depth)
            ids = head.to_target(toks[-1])
            o = head.step(o, ids, torch.tensor([pos + d - 1], device=o.device), None, cache)
            toks.append(head.logits(o).argmax(-1))
        cache.truncate(base)
        return TreeProposal(
            tokens=head.to_target(torch.cat(toks)),
            layout=TreeLayout.chain(len(toks)),
            steps=len(toks),
        )

    def draft_auto(self, state) -> TreeProposal:
        """k=auto: expand while one more depth can raise expected tokens per second (the
        frontier's calibrated reach bounds what its children add: their probabilities sum to
        at most 1), each time only the frontier nodes whose children could raise it, then
        verify the n best nodes, n maximising (1 + Σ ŝ)/T(n)
        (methods.auto.TreeChooser). Every node's ŝ comes from the draft alone. The pool's
        bookkeeping (a few nodes a depth) is plain Python: tensors only for the head."""
        cache, auto = state.aux["head_cache"], self.auto
        if auto.skip():  # a plain round; the head reads the pending features next time
            return self.plain_proposal(state)
        n = state.length
        out = self._catch_up(state)
        base = len(cache)
        values, ids = self._top(out[-1:])
        pool = _Pool(len(ids[0]))
        frontier = pool.grow(-1, values[0], ids[0], auto.lam(1))
        feats = out[-1:].expand(len(frontier), -1)
        chain = {-1: []}
        steps = 1
        for d in range(1, auto.depth):
            lam = auto.lam(d + 1)
            bound = [min(math.exp(pool.score[i]) * lam, pool.est[i]) for i in frontier]
            width = auto.deeper(pool.ranked(auto.max_nodes), bound, steps)
            if not width:
                break
            if width < len(bound):  # expand only the frontier nodes whose children could pay
                pick = sorted(sorted(range(len(bound)), key=lambda i: -bound[i])[:width])
                frontier, feats = [frontier[i] for i in pick], feats[pick]
            parents = [pool.parent[i] for i in frontier]
            tokens = [pool.token[i] for i in frontier]
            o = self._expand(cache, base, n - 2 + d, frontier, parents, tokens, feats, chain)
            steps += 1
            frontier, rows = pool.children(frontier, self._top(o), lam)
            feats = o[rows]
        cache.truncate(base)
        return self._best_nodes(pool, steps)

    def _top(self, o) -> tuple[list, list]:
        """The head's K best draft tokens after each row of `o`: (log-probabilities, ids), one
        list of K per row."""
        lp = torch.log_softmax(self.head.logits(o).float(), -1)
        top = lp.topk(min(self.top_k, lp.shape[-1]), dim=-1)
        return top.values.tolist(), top.indices.tolist()

    def _best_nodes(self, pool: "_Pool", steps: int) -> TreeProposal:
        """k=auto's proposal from the drafted pool: the n nodes of best ŝ, n maximising the
        expected rate (methods.auto.TreeChooser.size), as a tree."""
        auto = self.auto
        # best ŝ first, ties by creation order: a parent (never below its child) comes first
        order = sorted(range(len(pool.est)), key=lambda i: -pool.est[i])[: auto.max_nodes]
        keep_n = auto.size([pool.est[i] for i in order], steps)
        auto.note(keep_n, steps)
        keep = sorted(order[:keep_n])
        index = {j: i for i, j in enumerate(keep)}
        parents = [index[pool.parent[j]] if pool.parent[j] >= 0 else -1 for j in keep]
        ids = torch.tensor([pool.token[j] for j in keep], dtype=torch.long)
        return TreeProposal(
            tokens=self.head.to_target(ids.to(self.head.embed.device)),
            layout=TreeLayout.from_parents(parents),
            steps=steps,
            chosen=keep_n,
            reach=[math.exp(pool.score[j]) for j in keep],
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


class _Pool:
    """k=auto's drafted nodes in creation order (parents before children): draft token, parent
    (−1: the root), cumulative log-probability and ŝ, the calibrated reach (never above the
    parent's)."""

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
            s = base + v
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
