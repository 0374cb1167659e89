"""On-policy distillation for the EAGLE heads (`drafter.onpolicy`): the head trains on the chains
it drafts itself, scored by the target at the head's own draft positions (the idea of Draft-OPD,
arXiv 2605.29343, on our training-time test).

The training-time test (train/eagle_spec.py) unrolls `unroll` steps; step j at position s continues
the chain that starts at t = s − j + 1. Off policy, its token input is the data's x_{s+1}, so the
head only ever sees chains that followed the target. On policy:

1. a pass without gradients drafts every chain: step j − 1's own token at position s − 1 (the
   argmax where the sequence's answer was greedy, a draw from the head's distribution where it
   was sampled at T = 1, as each is verified) is step j's input at s;
2. a drafted chain that still equals the data's tokens has the data's own teacher at every step
   (the target's distribution there, `soft`); for up to `onpolicy` chains per sequence that left
   the data, the target forwards the prefix x_{≤t+1} with those chains appended as branches
   under a tree mask (each branch token sees the prefix up to its chain's start and its own
   chain), and the final hidden state at drafted token x̂_{t+j} gives step j's teacher;
3. the training pass reads the drafted tokens, and step j's loss is the KL from that teacher to
   the head's distribution at the positions that have one (the chains not scored are left out).

The target here is the training's own copy of it (float32 torch, `target` in train/__main__.py);
the features the head reads stay the states target's. A step costs a target forward of each
sequence's prefix on top of the head's: compare it with the plain continuation at equal CPU time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from groundfloor.errors import UserError


def check(chains: int, unroll: int, soft: bool) -> int:
    """`drafter.onpolicy` as given, or one line where the head has nothing to draft or no
    teacher to score its drafts with."""
    if chains and (unroll < 2 or not soft):
        raise UserError(
            f"drafter.onpolicy={chains} needs chains to draft and a teacher to score them: "
            f"drafter.unroll ≥ 2 (here {unroll}) and drafter.soft=true (here {soft})"
        )
    return int(chains)


def draw(logits: torch.Tensor, greedy: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    """(B, L) target ids of the head's own next tokens: argmax where `greedy` (B,), else a draw
    from softmax(logits)."""
    probs = torch.softmax(logits.float(), -1)
    sampled = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])
    pick = torch.where(greedy[:, None], probs.argmax(-1), sampled)
    return d2t[pick]


def next_input(drafted: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """Step j's token input: position s reads step j − 1's drafted token at s − 1 (position 0,
    never scored past step 1, keeps the data's)."""
    return torch.cat([tok[:, :1], drafted[:, :-1]], dim=1)


def still_on_data(drafted: list[torch.Tensor], tok: torch.Tensor) -> list[torch.Tensor]:
    """matched[j − 1][b, s]: the chain of step j at position s drafted the data's tokens so far
    (step 1: always)."""
    matched = [torch.ones_like(tok, dtype=torch.bool)]
    for d in drafted:
        same = next_input(d, tok) == tok
        prev = torch.cat([matched[-1][:, :1], matched[-1][:, :-1]], dim=1)
        matched.append(prev & same)
    return matched


def branch_mask(prefix: int, starts: list[int], depth: int) -> torch.Tensor:
    """(1, 1, N, N) boolean mask (True: attend) of a prefix of `prefix` tokens followed by one
    branch of `depth` tokens per chain start t (branch token i sees the prefix up to t + 1 and
    its chain's tokens up to i)."""
    n = prefix + len(starts) * depth
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool).tril()
    for c, t in enumerate(starts):
        at = prefix + c * depth
        mask[at : at + depth, : t + 2] = True
        mask[at : at + depth, at : at + depth] = torch.ones(depth, depth, dtype=torch.bool).tril()
    return mask[None, None]


@torch.no_grad()
def branch_teachers(target, rows: torch.Tensor, ids: torch.Tensor, starts: list[int],
                    chains: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """(C, depth, V_d): the target's distribution over the draft vocabulary (`rows`: its output
    layer's rows for it) after each drafted token of each chain. ids: (n,) the data's tokens;
    chains: (C, depth) drafted target ids, chain c's token i at position starts[c] + 2 + i."""
    depth = chains.shape[1]
    prefix = max(starts) + 2
    seq = torch.cat([ids[:prefix], chains.reshape(-1)])
    pos = [torch.arange(prefix)] + [t + 2 + torch.arange(depth) for t in starts]
    hidden = target.model(
        input_ids=seq[None],
        attention_mask=branch_mask(prefix, starts, depth),
        position_ids=torch.cat(pos)[None],
    ).last_hidden_state[0, prefix:]
    return torch.softmax(hidden.float() @ rows.T, -1).reshape(len(starts), depth, -1)


@dataclass
class Teachers:
    """Per step j (index j − 1): the (B, L, V_d) teacher, where one holds, and where the chain is
    still on the data (the data's own teacher and label)."""

    probs: list[torch.Tensor]
    held: list[torch.Tensor]
    on_data: list[torch.Tensor]


def teachers(spec, ids, tok, drafted, matched, soft, lengths, starts_from, chains_per_seq):
    """The data's `soft` where the chain is still on the data, the target's branches for up to
    `chains_per_seq` chains per sequence that left it (chosen at random among those that did),
    nothing elsewhere. A step's teacher is a copy of `soft` only once a branch writes into it."""
    steps = len(drafted) + 1
    B, L = tok.shape
    teach = [soft] * steps
    have = [m.clone() for m in matched]
    for b in range(B):
        last = int(lengths[b]) - 3  # the last position with a label (x_{s+2}, s + 2 < n)
        lo = max(int(starts_from[b]), 0)
        ends = torch.arange(L) - (steps - 1)  # chain start of the last step's position s
        off = ~matched[-1][b] & (ends >= lo) & (ends + steps - 1 <= last)
        cand = ends[off]
        if not len(cand):
            continue
        pick = cand[torch.randperm(len(cand))[:chains_per_seq]].sort().values.tolist()
        chain = torch.stack([
            torch.stack([drafted[i][b, t + i] for i in range(steps - 1)]) for t in pick
        ])  # fmt: skip
        got = branch_teachers(spec.target, spec.teacher, ids[b], pick, chain)
        for c, t in enumerate(pick):
            for j in range(2, steps + 1):
                s = t + j - 1
                if not have[j - 1][b, s]:
                    if teach[j - 1] is soft:
                        teach[j - 1] = soft.clone()
                    teach[j - 1][b, s] = got[c, j - 2]
                    have[j - 1][b, s] = True
    return Teachers(teach, have, matched)
