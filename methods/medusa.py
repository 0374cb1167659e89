"""`medusa`: Medusa heads on the target's last hidden state draft a static tree, verified at once.

Per round: the heads read h (the target's hidden state at the last accepted position, kept in
state.aux from the previous verify), each head d proposes its top-k tokens for depth d + 1
below the root (the last committed token), the configured tree picks which (depth, rank)
candidates to verify, and one tree-masked target forward scores them all (methods.base.TreeMethod).
Acceptance: greedy walks the argmax path; at T > 0 the tree rule (recursive rejection over
siblings, point-mass candidates) keeps the target's distribution. `acceptance: typical` is
Medusa's typical acceptance: faster, *lossy*, and reported under the name `medusa-typical`.
Knobs: heads (directory or Hub id), num_heads, tree (name | auto | paths), tree_size, k (tree
depth), draft_vocab (score only the N most frequent tokens, drafters.draftvocab; null: all).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drafters import medusa as heads_io
from drafters import weights
from drafters.draftvocab import DraftVocab
from engines import hugepages
from groundfloor.errors import UserError
from groundfloor.models import local_dir
from groundfloor.sampling import probs
from groundfloor.tree import TreeLayout
from methods import auto, budget, knobs, sizing, static_trees
from methods.auto import Plan
from methods.base import TreeMethod, TreeProposal


@dataclass(frozen=True)
class MedusaKnobs:  # defaults: conf/method/medusa.yaml
    heads: str | None
    num_heads: int | None
    tree: object  # auto | a named tree | a list of rank paths
    tree_size: int
    acceptance: str
    posterior_threshold: float
    posterior_alpha: float


class Medusa(TreeMethod):
    name = "medusa"
    hidden_layers = (-1,)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, MedusaKnobs)
        k, size, acc = sizing.k_or_none(self), kn.tree_size, kn.acceptance  # None: all heads
        for ok, knob, value, valid in (
            (k is None or k >= 1, "k", k, "use an integer >= 1 (tree depth) or null (every head)"),
            (int(size) >= 1, "tree_size", size, "use an integer >= 1 (nodes of an auto tree)"),
            (
                acc in ("exact", "typical"),
                "acceptance",
                acc,
                "choose one of: exact (lossless), typical (Medusa's, lossy)",
            ),
        ):
            knobs.need(self, ok, knob, value, valid)
        draft_vocab = self.draft_vocab()
        path = self._heads_dir(kn, ctx)
        self.heads, hcfg = heads_io.load(path, ctx.dtype)
        self.heads.to(ctx.device)
        n = kn.num_heads or self.heads.num_heads
        if not 1 <= n <= self.heads.num_heads:
            raise UserError(
                f"method.num_heads={n} is not valid; the heads in {path} have "
                f"1..{self.heads.num_heads}"
            )
        paths = self._tree_paths(kn.tree, hcfg.get("rank_accuracy"), int(size), k or n, n)
        self.layout, order = TreeLayout.from_paths(paths)
        self.head_of = [len(p) - 1 for p in order]  # each node's head (a list for the sizing)
        self.node_head = torch.tensor(self.head_of, device=ctx.device)
        self.node_rank = torch.tensor([p[-1] for p in order], device=ctx.device)
        self.topk = int(self.node_rank.max()) + 1
        self.depth = self.layout.max_depth
        prior = static_trees.path_reach(order, hcfg.get("rank_accuracy")) or auto.PRIOR
        self.policy = sizing.pick(  # k=auto: the whole tree, pruned per round from its rates
            self,
            lambda: auto.NodeRates(self.layout.parents, budget.MAX_NODES, prior),
            lambda k: auto.FixedTree(self.depth, None, self.layout.size),  # every node
        )
        self._vocab_and_weights(ctx, hcfg.get("frequent_ids"), draft_vocab, n)
        self.info = {
            "tree_nodes": self.layout.size,
            "depth": self.depth,
            "draft_vocab": self.vocab.size,
            "drafter_weights": self.weights,
        }
        self.typical = acc == "typical"
        if self.typical:
            self._typical_acceptance(kn)

    def _vocab_and_weights(self, ctx, frequent_ids, draft_vocab, n: int) -> None:
        """The rows the heads score (heads sharing the target's output layer may score only the
        most frequent tokens) and the heads' weights, int8 where drafter_weights chooses it."""
        self.lm_head = ctx.target.output_weight()
        self.vocab = DraftVocab(
            self.lm_head, frequent_ids, draft_vocab if self.heads.own is None else None
        )
        self.weights = "float"  # published heads with their own V-row layers stay as stored
        if self.heads.own is None:
            self.weights = weights.choose(ctx.drafter_weights, self.vocab.weight, n, ctx.device)
        if self.weights == "int8":
            weights.quantize(self.heads)
            self.vocab.quantize()
        # a drafting step reads the heads and their vocabulary rows cold: 2 MB pages
        lin = self.vocab.linear
        hugepages.place(
            [*self.heads.parameters(), *self.heads.buffers()]
            + ([*lin.buffers()] if lin is not None else [])
        )

    @staticmethod
    def _heads_dir(kn, ctx):
        """method.heads, else the model's shipped heads: a local folder with config.json."""
        path = kn.heads or ctx.model_cfg.get("medusa")
        if not path:
            raise UserError("method=medusa needs heads: set method.heads=<dir> or model.medusa")
        path = local_dir(str(path), "method.heads")
        if not (path / "config.json").exists():
            raise UserError(
                f"method.heads={str(path)!r} holds no Medusa heads (config.json and "
                f"{heads_io.WEIGHTS}); train them with `python -m train "
                f"drafter=medusa`"
            )
        return path

    @staticmethod
    def _tree_paths(tree, rank_accuracy, size: int, depth: int, n: int) -> list:
        """method.tree (auto, a named tree or rank paths) as rank paths over n heads."""
        try:
            return static_trees.resolve(tree, rank_accuracy, size, depth, n)
        except KeyError:
            raise UserError(
                f"method.tree={tree!r} is unknown; choose one of: auto, "
                f"{', '.join(static_trees.TREES)}, or a list of paths"
            )
        except ValueError as e:
            raise UserError(f"method.tree: {e}")

    def _typical_acceptance(self, kn) -> None:
        """Medusa's typical acceptance (lossy): its ε and α, checked."""
        self.name, self.lossless = "medusa-typical", False
        self.posterior_threshold = kn.posterior_threshold
        self.posterior_alpha = kn.posterior_alpha
        knobs.need(
            self,
            0 < self.posterior_threshold <= 1,
            "posterior_threshold",
            self.posterior_threshold,
            "use a probability in (0, 1] (ε)",
        )
        knobs.need(
            self,
            self.posterior_alpha > 0,
            "posterior_alpha",
            self.posterior_alpha,
            "use a value > 0 (α)",
        )

    def static_bytes(self) -> int:
        return self.heads.extra_bytes() + self.vocab.extra_bytes()

    def max_verify_width(self) -> int:
        return self.layout.size + 1

    def prefill(self, state) -> torch.Tensor:
        out = self.target.forward(state.tokens[None], state.cache, logits_to_keep=1, hidden=(-1,))
        state.aux["hidden"] = out.hidden[-1][0, -1]
        return out.logits[0, -1]

    def draft(self, state) -> TreeProposal:
        if self.policy.skip():  # k=auto's plain round: the heads cost a step
            return self.plain_proposal(state)
        keep = self.policy.choose(steps=1)
        # only the heads the verified nodes come from: a node at depth d is head d - 1's
        n = max((self.head_of[j] + 1 for j in keep), default=0)
        if n == 0:  # k=auto verifies none of the template: the heads are not run
            return self.plain_proposal(state)
        # head d's logits at h predict the token d + 1 places below the root
        h = state.aux["hidden"]
        if self.heads.own is None:
            logits = self.vocab.logits(self.heads.features(h, n))  # (n, V')
        else:
            logits = self.heads.logits(h, self.lm_head, n)  # (n, V)
        cand = self.vocab.to_target(logits.topk(self.topk, dim=-1).indices)  # (n, topk)
        whole = len(keep) == self.layout.size
        idx = slice(None) if whole else torch.tensor(keep, device=cand.device)
        layout = (
            self.layout
            if whole
            else TreeLayout.from_parents(auto.subtree(self.layout.parents, keep))
        )
        return TreeProposal(
            tokens=cand[self.node_head[idx], self.node_rank[idx]],
            layout=layout,
            steps=1,
            plan=Plan(nodes=keep),
        )

    def accept_path(self, state, tree, logits):
        if self.typical and not state.sampling.greedy:
            return self._typical(logits, tree, state)
        return super().accept_path(state, tree, logits)  # candidates are point masses

    def after_accept(self, state, proposal, nodes, logits, hidden) -> None:
        state.aux["hidden"] = hidden[-1][0, nodes[-1] + 1 if nodes else 0]

    def _typical(self, logits, tree, state) -> tuple[list[int], int]:
        """Medusa's typical acceptance (lossy): accept x if p(x) > min(ε, δ·exp(−H(p))).
        Returns node indices like groundfloor.tree."""
        p = probs(logits, state.sampling)
        ent = -(p * p.clamp_min(1e-12).log()).sum(-1)
        thresh = torch.minimum(
            torch.full_like(ent, self.posterior_threshold), self.posterior_alpha * torch.exp(-ent)
        )
        kids, tokens, path = tree.children(), tree.tokens, []
        row = 0  # verify row of the current node: 0 = root, i + 1 = node i
        while True:
            ok = [c for c in kids[row] if p[row, tokens[c]] > thresh[row]]
            if not ok:
                nxt = int(torch.multinomial(p[row], 1, generator=state.generator))
                return path, nxt
            node = max(ok, key=lambda c: float(p[row, tokens[c]]))
            path.append(node)
            row = node + 1
