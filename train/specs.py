"""Training specs: how each drafter turns distillation data into batches, a loss and a file.

A spec exposes `module`, `batches(split, rng)`, `step_loss(batch)` and `save(out)` for
`train.loop.train`. The held-out split is chosen per training prompt (hash of its id), so
no prompt contributes to both splits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from drafters import draftmodel, medusa
from drafters.draftvocab import DraftVocab, inverse
from groundfloor.errors import UserError
from train.schedule import epoch_batches

FREQUENT = 8192  # token ids stored by frequency with heads that draft over the full vocabulary


def answer_counts(seqs: list[dict], vocab: int) -> torch.Tensor:
    """How often each token id occurs in the answers (not the prompts) of `seqs`."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for seq in seqs:
        counts += torch.bincount(seq["ids"][seq["start"] :].long(), minlength=vocab)
    return counts


def frequent_ids(counts: torch.Tensor, n: int = FREQUENT) -> list[int]:
    """The n most frequent ids, most frequent first: a frequency-ranked draft vocabulary
    (methods' `draft_vocab` knob) for heads that share the target's full output layer."""
    return counts.topk(min(n, counts.numel())).indices.tolist()


COVERAGE = 0.97  # share of held-out answer tokens a coverage-chosen draft vocabulary holds
MAX_DRAFT_VOCAB = 8192  # its ceiling: the head's output layer stays small


def coverage_vocab(
    train: torch.Tensor, held_out: torch.Tensor, goal: float = COVERAGE, cap: int = MAX_DRAFT_VOCAB
) -> tuple[torch.Tensor, float]:
    """The draft vocabulary FR-Spec's way: the training answers' most frequent ids, the fewest
    whose share of the held-out answer tokens reaches `goal` (at most `cap`). Returns the ids
    (sorted) and the held-out coverage they reach."""
    ranked = train.argsort(descending=True, stable=True)
    share = held_out[ranked].cumsum(0).double() / held_out.sum().clamp_min(1)
    reach = (share >= goal).nonzero()
    n = min(int(reach[0]) + 1 if len(reach) else len(ranked), cap)
    return ranked[:n].sort().values, float(share[n - 1])


def draft_vocab(seqs: dict, vocab: int, size) -> tuple[torch.Tensor, float]:
    """The draft vocabulary a drafter config's `vocab_size` asks for: an integer (the most
    frequent training answer tokens) or "coverage" (coverage_vocab); with its held-out
    coverage."""
    train = answer_counts(seqs["train"], vocab)
    held = answer_counts(seqs["eval"], vocab) if seqs.get("eval") else train
    if str(size) == "coverage":
        return coverage_vocab(train, held)
    try:
        n = min(int(size), vocab)
    except (TypeError, ValueError):
        raise UserError(f"vocab_size={size!r} is not valid; give an integer or coverage")
    ids = train.topk(n).indices.sort().values
    return ids, float(held[ids].sum() / held.sum().clamp_min(1))


def is_heldout(prompt_id: str, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(prompt_id.encode()).digest()[:4], "little")
    return (h % 10_000) < fraction * 10_000


class MedusaSpec:
    """Positions t of every answer: input h_t (last hidden state), labels ids[t + 2 + i].

    The loss scores the 8,192 most frequent answer tokens (rows of the shared LM head); a label
    outside them counts as a miss in the accuracies. With `init` (heads in Medusa's layout that
    share the target's output layer, e.g. the shipped ones) training continues from them."""

    @staticmethod
    def needed_layers(cfg) -> list[int]:
        return [-1]

    @classmethod
    def from_config(cls, data, target, cfg):
        d = cfg.drafter
        return cls(
            data,
            target,
            int(d.num_heads),
            int(d.num_layers),
            int(d.batch_size),
            float(cfg.holdout),
            str(cfg.target),
            d.get("init"),
        )

    def __init__(
        self,
        data: list[dict],
        target,
        num_heads: int,
        num_layers: int,
        batch_size: int,
        holdout: float,
        base: str,
        init: str | None = None,
    ):
        self.lm_head = target.lm_head.weight.detach().float()
        self.init = str(init) if init else None
        if self.init:
            self.module = warm_medusa(Path(self.init), num_heads, num_layers, self.lm_head.shape[1])
        else:
            self.module = medusa.MedusaHeads(self.lm_head.shape[1], num_heads, num_layers)
        self.batch_size, self.base = batch_size, base
        parts = {"train": ([], []), "eval": ([], [])}
        for seq in data:
            pos, lab = medusa.labels_for(seq["ids"], seq["start"], num_heads)
            split = "eval" if is_heldout(seq["id"], holdout) else "train"
            parts[split][0].append(seq["hidden"][-1][pos])
            parts[split][1].append(lab)
        V = self.lm_head.shape[0]
        self.frequent = frequent_ids(
            answer_counts([x for x in data if not is_heldout(x["id"], holdout)], V)
        )
        # cross-entropy over the frequent tokens only: V / 8192 times cheaper on a CPU; the
        # heads draft over them at run time too (draft_vocab)
        vocab = DraftVocab(self.lm_head, self.frequent, len(self.frequent))
        self.lm_head = vocab.weight
        t2d = inverse(vocab.ids, V)
        self.h = {k: torch.cat(v[0]) for k, v in parts.items() if v[0]}
        self.labels = {}
        for k, v in parts.items():
            if v[1]:
                lab = torch.cat(v[1], dim=1)
                self.labels[k] = torch.where(lab == -100, lab, t2d[lab.clamp_min(0)])

    def sizes(self) -> dict:
        return {k: v.shape[0] for k, v in self.h.items()}

    def epoch_batches(self) -> int:
        """Training batches in one epoch (batches() drops a last short one)."""
        return max(self.h["train"].shape[0] // min(self.batch_size, self.h["train"].shape[0]), 1)

    def batches(self, split: str, rng: torch.Generator | None):
        n = self.h[split].shape[0]
        size = min(self.batch_size, n)  # a data set smaller than one batch is one batch
        order = torch.randperm(n, generator=rng) if rng is not None else torch.arange(n)
        for b in range(0, n - size + 1 if rng is not None else n, size):
            idx = order[b : b + size]
            yield self.h[split][idx].float(), self.labels[split][:, idx]

    def step_loss(self, batch):
        h, lab = batch
        return medusa.loss(self.module, h, lab, self.lm_head)

    @torch.no_grad()
    def rank_accuracy(self, top: int = 10) -> list[list[float]]:
        """P(label is the head's rank-r candidate) on the held-out split, per head: tree design."""
        hits = torch.zeros(self.module.num_heads, top)
        count = torch.zeros(self.module.num_heads)
        self.module.eval()
        for h, lab in self.batches("eval", None):
            logits = self.module.logits(h, self.lm_head)
            ranks = logits.topk(top, dim=-1).indices  # (heads, B, top)
            for i in range(self.module.num_heads):
                ok = lab[i] != -100
                hits[i] += (ranks[i][ok] == lab[i][ok, None]).float().sum(0)
                count[i] += ok.sum()
        return (hits / count.clamp_min(1)[:, None]).round(decimals=4).tolist()

    def save(self, out: Path, eval_result: dict) -> None:
        medusa.save(
            self.module,
            out,
            self.base,
            extra={
                "rank_accuracy": self.rank_accuracy(),
                "eval": eval_result,
                "train_positions": self.sizes(),
                "frequent_ids": self.frequent,
                **({"init": self.init} if self.init else {}),
            },
        )


def warm_medusa(path: Path, num_heads: int, num_layers: int, hidden: int) -> medusa.MedusaHeads:
    """Saved Medusa heads at `path`, in float32 and trainable, checked against the spec's shape
    and the target's hidden size (they must share the target's output layer, as the spec
    trains them)."""
    if not (path / "config.json").exists():
        raise UserError(
            f"drafter.init={str(path)!r} holds no Medusa heads (no config.json); give a "
            "directory `python -m train drafter=medusa` wrote"
        )
    heads, _ = medusa.load(path)
    shape = (heads.num_heads, heads.num_layers)
    if shape != (num_heads, num_layers) or heads.own is not None:
        raise UserError(
            f"drafter.init={str(path)!r} has {shape[0]} head(s) of {shape[1]} layer(s)"
            f"{' with their own output layers' if heads.own is not None else ''}; "
            f"drafter.num_heads={num_heads} drafter.num_layers={num_layers} sharing the "
            "target's output layer here: set them to match"
        )
    width = heads.blocks[0][0].linear.weight.shape[1]
    if width != hidden:
        raise UserError(
            f"drafter.init={str(path)!r} holds heads of hidden size {width}; this target's "
            f"hidden size is {hidden}: give heads trained for this target"
        )
    return heads.float().train().requires_grad_(True)


class SequenceSpec:
    """Shared by specs that train on whole sequences: the prompt-level split, sizes, and the
    batch order (shuffled for training, in order for evaluation)."""

    def split(self, data: list[dict], holdout: float) -> None:
        self.seqs = {"train": [], "eval": []}
        for seq in data:
            self.seqs["eval" if is_heldout(seq["id"], holdout) else "train"].append(seq)

    def sizes(self) -> dict:
        return {k: sum(len(s["ids"]) - s["start"] for s in v) for k, v in self.seqs.items()}

    def epoch_batches(self) -> int:
        """Training batches in one epoch (groups() keeps a last short one)."""
        return epoch_batches(len(self.seqs["train"]), self.batch_size)

    def groups(self, split: str, rng: torch.Generator | None):
        seqs = self.seqs[split]
        order = (
            torch.randperm(len(seqs), generator=rng).tolist()
            if rng is not None
            else list(range(len(seqs)))
        )
        for b in range(0, len(order), self.batch_size):
            yield [seqs[i] for i in order[b : b + self.batch_size]]


class DraftSpec(SequenceSpec):
    """Whole sequences; the draft predicts the target's next token over the answer positions.

    Labels are draft-vocabulary ids (t2d of the next token); a next token outside the draft
    vocabulary is excluded from the loss but counted as a miss in the accuracy.

    With `init` (a saved draft model, e.g. the shipped one) training continues from it, in its
    own draft vocabulary unless `keep_vocab` is false: then the vocabulary is chosen anew by
    vocab_size on this data, a token's trained row follows it and new tokens start from the
    target's output rows, as a new draft's do (train.evaluate loads saved drafts this way).
    """

    @staticmethod
    def needed_layers(cfg) -> list[int]:
        return []  # the draft model reads token ids only

    @classmethod
    def from_config(cls, data, target, cfg):
        d = cfg.drafter
        return cls(
            data,
            target,
            int(d.num_layers),
            d.vocab_size,
            int(d.batch_size),
            float(cfg.holdout),
            str(cfg.target),
            d.get("init"),
            bool(d.get("keep_vocab", True)),
        )

    def __init__(
        self,
        data: list[dict],
        target,
        num_layers: int,
        vocab_size: int | str,
        batch_size: int,
        holdout: float,
        base: str,
        init: str | None = None,
        keep_vocab: bool = True,
    ):
        self.batch_size, self.base = batch_size, base
        self.init = str(init) if init else None
        self.split(data, holdout)
        V = target.config.vocab_size
        if self.init:
            self.module = warm_draft(Path(self.init), target, num_layers)
            if not keep_vocab:
                refit_draft_vocab(self.module, draft_vocab(self.seqs, V, vocab_size)[0], target)
            self.d2t = self.module.d2t
            self.coverage = held_out_coverage(self.seqs, self.d2t, V)
        else:
            self.d2t, self.coverage = draft_vocab(self.seqs, V, vocab_size)
            self.module = draftmodel.from_target(target, num_layers, self.d2t)
        self.t2d = inverse(self.d2t, V)
        self.module.train().requires_grad_(True)

    def batches(self, split: str, rng: torch.Generator | None):
        for group in self.groups(split, rng):
            L = max(len(s["ids"]) for s in group)
            ids = torch.zeros(len(group), L, dtype=torch.long)
            mask = torch.zeros(len(group), L, dtype=torch.long)
            labels = torch.full((len(group), L), -100, dtype=torch.long)
            for r, s in enumerate(group):
                n = len(s["ids"])
                ids[r, :n] = s["ids"].long()
                mask[r, :n] = 1
                nxt = s["ids"][s["start"] :].long()  # next tokens of positions start-1 .. n-2
                labels[r, s["start"] - 1 : n - 1] = self.t2d[nxt]
            yield ids, mask, labels

    def step_loss(self, batch):
        ids, mask, labels = batch
        logits = self.module.small_logits(ids, mask)
        scored = labels != -100
        inside = labels >= 0
        loss = torch.nn.functional.cross_entropy(logits[inside], labels[inside])
        hit = (logits.argmax(-1) == labels) & inside
        acc = hit[scored].float().mean()
        return loss, loss.detach()[None], acc.detach()[None]

    def save(self, out: Path, eval_result: dict) -> None:
        draftmodel.save(
            self.module,
            out,
            self.base,
            extra={
                "eval": eval_result,
                "vocab_coverage": round(self.coverage, 4),
                "train_tokens": self.sizes(),
                **({"init": self.init} if self.init else {}),
            },
            int8=("head.weight",),  # the reduced-vocabulary head in int8 (drafters.storage)
        )


def warm_draft(path: Path, target, num_layers: int):
    """The saved draft model at `path` (drafters.draftmodel's layout), in float32, checked
    against the spec's depth."""
    if not draftmodel.is_distilled(path):
        raise UserError(
            f"drafter.init={str(path)!r} is not a saved draft model (no {draftmodel.MARKER}); "
            "give a directory `python -m train drafter=draft` wrote"
        )
    draft = draftmodel.load(path, target, torch.float32)
    if draft.config.num_hidden_layers != num_layers:
        raise UserError(
            f"drafter.init={str(path)!r} has {draft.config.num_hidden_layers} layer(s); "
            f"drafter.num_layers={num_layers} here: set it to match"
        )
    return draft


def refit_draft_vocab(draft, d2t: torch.Tensor, target) -> None:
    """A draft model's output layer over the draft vocabulary `d2t` (target ids) in place of
    its own: the rows of tokens in both kept, the others the target's output rows."""
    start = target.get_output_embeddings().weight.detach()[d2t]
    draft.head = refit_rows(draft.head, draft.d2t, d2t, draft.vocab, start)
    draft.d2t = d2t.long().to(draft.d2t.device)


def refit_rows(
    old: torch.nn.Linear, old_d2t: torch.Tensor, d2t: torch.Tensor, vocab: int, start=None
) -> torch.nn.Linear:
    """An output layer over the draft vocabulary `d2t` in place of `old` (over `old_d2t`; both
    target ids of a `vocab`-token target): a token in both keeps its trained row; the others
    start from `start`'s rows (one per id of d2t), or None: a new layer's initialisation."""
    where = inverse(old_d2t, vocab)[d2t]  # row in the old layer, or -1
    new = torch.nn.Linear(old.in_features, d2t.numel(), bias=False).to(old.weight)
    have = where >= 0
    with torch.no_grad():
        if start is not None:
            new.weight.copy_(start)
        new.weight[have] = old.weight[where[have]]
    return new


def held_out_coverage(seqs: dict, d2t: torch.Tensor, vocab: int) -> float:
    """The share of the held-out answer tokens (the training ones where none is held out) that
    the draft vocabulary `d2t` holds."""
    held = answer_counts(seqs["eval"] or seqs["train"], vocab)
    return float(held[d2t].sum() / held.sum().clamp_min(1))
