"""Training EAGLE heads on self-distilled data (spec for `train.loop.train`).

A batch is a few whole sequences (prompt + the target's answer) with the target's hidden states.
Position t's input is (f_t, x_{t+1}); its label is x_{t+2}, scored on answer tokens only.

Unrolled steps ("training-time test", EAGLE-3): step 1 reads the target's features; step j > 1
reads the head's own step-(j−1) outputs shifted one position, as when drafting j tokens deep.
A step-j query at position s attends exactly what it would at inference: step-1 keys (true
features) at positions ≤ s − j + 1 and, for 2 ≤ i ≤ j, the step-i key at position s − j + i (its
own drafted chain). Losses are weighted 0.8^(j−1).

    eagle   EAGLE-1/2 recipe: step 1 only in training (eval unrolls `eval_steps` to report
            per-position accuracy), loss = smooth-L1(out, f_{t+1}) + 0.1 · CE, the CE over the
            8,192 most frequent answer tokens (a full-vocabulary CE costs 6× more on a CPU; labels
            outside are left out of the loss and counted as misses)
    eagle3  `steps` unrolled steps in training (the paper's 7), CE over the reduced draft
            vocabulary (labels outside it are left out of the loss and counted as misses)
With `init` (a head in the published layout, e.g. the shipped one) training continues from that
head's weights, so a longer schedule on more data can resume from an artifact instead of from
random weights. It keeps the head's draft vocabulary (vocab_size is then not used) unless
`keep_vocab` is false: then the vocabulary is chosen anew by vocab_size on this data (new data
may use tokens the old vocabulary left out), the output rows of the tokens in both copied and
the others initialised as a new head's.
With `soft=True` the cross-entropy's target is the target model's own distribution over the
draft vocabulary at that position (softmax of its output layer's rows for the draft vocabulary
applied to its final hidden state: a KL to the target, renormalised over the draft vocabulary)
instead of the one sampled or greedy token; accuracies still count the token.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import AutoConfig

from drafters import eagle
from drafters.draftvocab import inverse
from engines.base import additive
from groundfloor.errors import UserError
from groundfloor.models import resolve_path
from train import onpolicy
from train.specs import (
    SequenceSpec,
    answer_counts,
    draft_vocab,
    frequent_ids,
    held_out_coverage,
    refit_rows,
)


def unroll_mask(L: int, j: int, dtype, device) -> torch.Tensor:
    """(1, 1, L, j·L) additive mask of unrolled step j (1-based) over the keys of steps 1..j."""
    s = torch.arange(L, device=device)[:, None]
    t = torch.arange(L, device=device)[None, :]
    blocks = [t <= s - j + 1] + [t == s - j + i for i in range(2, j + 1)]
    return additive(torch.cat(blocks, dim=1), dtype)[None, None]


class EagleSpec(SequenceSpec):
    @staticmethod
    def needed_layers(cfg) -> list[int]:
        """EAGLE-2 reads the last hidden state; EAGLE-3 its three taps (and the last for soft
        labels)."""
        if cfg.drafter.name != "eagle3":
            return [-1]
        n = AutoConfig.from_pretrained(resolve_path(str(cfg.target))).num_hidden_layers
        layers = list(cfg.drafter.get("layers") or eagle.default_layers("eagle3", n))
        return layers + ([-1] if cfg.drafter.soft else [])

    @classmethod
    def from_config(cls, data, target, cfg):
        d = cfg.drafter
        return cls(
            data,
            target,
            str(d.name),
            int(d.unroll),
            int(d.eval_unroll),
            d.vocab_size,
            int(d.batch_size),
            float(cfg.holdout),
            str(cfg.target),
            d.get("layers"),
            bool(d.soft),
            d.get("init"),
            bool(d.get("keep_vocab", True)),
            int(d.onpolicy),
        )

    def __init__(
        self,
        data: list[dict],
        target,
        kind: str,
        steps: int,
        eval_steps: int,
        vocab_size: int | str | None,
        batch_size: int,
        holdout: float,
        base: str,
        layers: list[int] | None = None,
        soft: bool = False,
        init: str | None = None,
        keep_vocab: bool = True,
        chains: int = 0,
    ):
        self.kind, self.base, self.batch_size, self.soft = kind, base, batch_size, soft
        self.onpolicy, self.target = onpolicy.check(chains, steps, soft), target
        self.steps, self.eval_steps = steps, max(eval_steps, steps)
        n_layers = target.config.num_hidden_layers
        self.layers = list(layers) if layers else eagle.default_layers(kind, n_layers)
        have = set(data[0]["hidden"]) if data else set()
        need = set(self.layers) | ({-1} if soft else set())
        if not need <= have:
            raise UserError(
                f"drafter={kind} needs target hidden states {sorted(need)}; the "
                f"distillation data keeps {sorted(have)} (set layers=[...] in the "
                f"training config)"
            )
        self.split(data, holdout)
        V = target.config.vocab_size
        counts = answer_counts(self.seqs["train"], V)
        self.frequent = frequent_ids(counts)  # stored with the head: method.draft_vocab
        self.init, self.keep_vocab = (str(init) if init else None), keep_vocab
        d2t = self._head(target, kind, vocab_size)
        self.module.embed = self.module.embed.float()
        self.module.out_head = self.module.out_head.float()
        if kind == "eagle":  # cross-entropy over the frequent tokens: V / 8192 times cheaper
            self.module.restrict(self.frequent, len(self.frequent))
            self.t2d = inverse(self.module.vocab.ids, V)
            rows = self.module.vocab.ids
        else:
            self.t2d = inverse(d2t, V)
            rows = d2t
        out = target.get_output_embeddings().weight.detach().float()
        self.teacher = out if rows is None else out[rows]  # (V_d, H): the target's logit rows
        self.d2t_ids = torch.arange(V) if rows is None else torch.as_tensor(rows).long()

    def _head(self, target, kind: str, vocab_size) -> torch.Tensor | None:
        """self.module: the head to train, warm-started from `self.init` or new; and
        self.coverage, the share of answer tokens its draft vocabulary holds → that
        vocabulary's token ids (EAGLE-3), or None (the full one)."""
        V, d2t, self.coverage = target.config.vocab_size, None, 1.0
        if self.init:
            self.module = self.warm_start(Path(self.init), target, kind)
            d2t = self.module.d2t if kind == "eagle3" else None
            if d2t is not None and not self.keep_vocab:
                d2t, _ = draft_vocab(self.seqs, V, vocab_size or V)
                refit_vocab(self.module, d2t)
            if d2t is not None:
                self.coverage = held_out_coverage(self.seqs, d2t, V)
            return d2t
        if kind == "eagle3":
            d2t, self.coverage = draft_vocab(self.seqs, V, vocab_size or V)
        cfg = eagle.head_config(target.config, kind)
        self.module = eagle.EagleHead(cfg, kind, self.layers, d2t).float().attach(target)
        return d2t

    def warm_start(self, path: Path, target, kind: str) -> eagle.EagleHead:
        """The head at `path` (published layout), trainable in float32, checked against the
        spec's kind and target layers."""
        if not (path / "config.json").exists():
            raise UserError(f"drafter.init={str(path)!r} is not a head directory (no config.json)")
        head, _ = eagle.load(path, target, torch.float32)
        if head.kind != kind or list(head.target_layers) != self.layers:
            raise UserError(
                f"drafter.init={str(path)!r} is a {head.kind} head over target layers "
                f"{head.target_layers}; drafter={kind} here reads layers {self.layers}"
            )
        return head.train().requires_grad_(True)

    def batches(self, split: str, rng: torch.Generator | None):
        for group in self.groups(split, rng):
            L = max(len(s["ids"]) for s in group) - 1  # positions t with a next token
            ids = torch.zeros(len(group), L + 1, dtype=torch.long)
            labels = torch.full((len(group), L), -100, dtype=torch.long)
            layers = self.layers + ([-1] if self.soft else [])
            hidden = [
                torch.zeros(len(group), L + 1, group[0]["hidden"][l].shape[-1]) for l in layers
            ]
            for r, s in enumerate(group):
                n = len(s["ids"])
                ids[r, :n] = s["ids"].long()
                for h, l in zip(hidden, layers):
                    h[r, :n] = s["hidden"][l].float()
                # position t's label is x_{t+2}: answer tokens only (t + 2 ≥ start)
                lo = max(s["start"] - 2, 0)
                labels[r, lo : n - 2] = ids[r, lo + 2 : n]
            greedy = torch.tensor([float(s.get("temperature", 0)) == 0 for s in group])
            lengths = torch.tensor([len(s["ids"]) for s in group])
            yield ids, hidden, labels, greedy, lengths

    def step_loss(self, batch):
        ids, hidden, labels = batch[:3]
        head = self.module
        steps = self.steps if head.training else self.eval_steps
        B, L = labels.shape
        feat = head.fuse([h[:, :L] for h in hidden[: len(self.layers)]])  # f_t, t < L
        tok = ids[:, 1 : L + 1]  # x_{t+1}
        pos = torch.arange(L)[None].expand(B, L)
        dl = self.t2d[labels.clamp_min(0)]
        dl[labels < 0] = -100
        soft = None
        if self.soft:  # the target's distribution of x_{t+2}: its output at position t + 1
            soft = torch.softmax(hidden[-1][:, 1 : L + 1] @ self.teacher.T, dim=-1)
        inputs, teach = [tok] * steps, None
        if self.onpolicy and head.training:
            inputs, teach = self._on_policy(batch, feat, tok, pos, soft, steps)
        per, acc = [], []
        total = 0.0
        unrolled = self._unroll(feat, pos, steps, lambda j, out: inputs[j - 1])
        for j, out in unrolled:
            scored = labels != -100
            scored[:, : j - 1] = False  # no step-j input before position j − 1
            on_data = scored if teach is None else scored & teach.on_data[j - 1]
            inside = on_data & (dl >= 0)
            if teach is not None:  # a chain off the data: scored where the target gave a teacher
                inside = inside | (scored & teach.held[j - 1] & ~teach.on_data[j - 1])
            logits = head.logits(out[inside])
            target = soft if teach is None else teach.probs[j - 1]
            hit = (logits.argmax(-1) == dl[inside]) & on_data[inside]
            if not inside.any():
                ce = out.sum() * 0
            elif target is not None:
                ce = -(target[inside] * F.log_softmax(logits.float(), -1)).sum(-1).mean()
            else:
                ce = F.cross_entropy(logits.float(), dl[inside])
            acc.append(hit.sum().float() / on_data.sum().clamp_min(1))
            per.append(ce.detach())
            if self.kind == "eagle" and j == 1:
                true_next = hidden[0][:, 1 : L + 1]
                reg = F.smooth_l1_loss(out[scored], true_next[scored])
                total = total + reg + 0.1 * ce
            else:
                total = total + 0.8 ** (j - 1) * ce
        return total, torch.stack(per), torch.stack(acc).detach()

    def _unroll(self, feat, pos, steps: int, tokens):
        """The training-time test: (j, the head's step-j output) for j = 1..steps, step j's token
        input `tokens(j, previous output)` and its features the previous step's outputs."""
        head, L = self.module, feat.shape[1]
        keys_k, keys_v, inp, out = [], [], feat, None
        for j in range(1, steps + 1):
            mask = unroll_mask(L, j, inp.dtype, inp.device)
            pk = torch.cat(keys_k, dim=-2) if keys_k else None
            pv = torch.cat(keys_v, dim=-2) if keys_v else None
            out, k, v = head(inp, tokens(j, out), pos, mask, pk, pv)
            keys_k.append(k)
            keys_v.append(v)
            yield j, out
            inp = torch.cat([inp[:, :1], out[:, :-1]], dim=1)  # position s reads out[s − 1]

    def _on_policy(self, batch, feat, tok, pos, soft, steps: int):
        """(each step's token input, its onpolicy.Teachers) of on-policy distillation
        (train/onpolicy.py)."""
        ids, _, labels, greedy, lengths = batch
        drafted = []

        def own(j, out):  # step j reads step j − 1's own tokens
            if j == 1:
                return tok
            drafted.append(onpolicy.draw(self.module.logits(out), greedy, self.d2t_ids))
            return onpolicy.next_input(drafted[-1], tok)

        with torch.no_grad():
            for _, last in self._unroll(feat.detach(), pos, steps - 1, own):
                pass
            drafted.append(onpolicy.draw(self.module.logits(last), greedy, self.d2t_ids))
        matched = onpolicy.still_on_data(drafted, tok)
        starts = (labels != -100).float().argmax(1)  # each sequence's first scored position
        teach = onpolicy.teachers(
            self, ids, tok, drafted, matched, soft, lengths, starts, self.onpolicy
        )
        return [tok] + [onpolicy.next_input(d, tok) for d in drafted], teach

    def save(self, out: Path, eval_result: dict) -> None:
        eagle.save(
            self.module,
            out,
            self.base,
            extra={
                "eval": eval_result,
                "vocab_coverage": round(self.coverage, 4),
                "train_tokens": self.sizes(),
                "unrolled_steps": self.steps,
                "soft_targets": self.soft,
                **({"init": self.init} if self.init else {}),
                **({"frequent_ids": self.frequent} if self.frequent else {}),
            },
            # the draft-vocabulary output layer, most of the head's bytes, stored in int8
            int8=("lm_head.weight",) if self.kind == "eagle3" else (),
        )


def refit_vocab(head: eagle.EagleHead, d2t: torch.Tensor) -> None:
    """An EAGLE-3 head's output layer over the draft vocabulary `d2t` (target ids) in place of
    its own: the rows of tokens in both kept, the others initialised as a new head's."""
    head.lm_head = refit_rows(head.lm_head, head.d2t, d2t, head.config.vocab_size)
    head.d2t = d2t.long().to(head.d2t.device)
