"""Self-distillation data: the target answers the training prompts; we keep its token ids.

    python -m train.distill [target=...] [limit=N] [distill.device=cuda]   # build (resumable)

Batches of prompts are decoded together on the engine layer (engines/: the lean forward where
supported), one token per row per step. Where the lean engine runs several sequences as one
native call (weights on its native kernels), each prompt keeps a cache of its own
(decode_seqs): no padding, and each answer is the one a batch-1 decode gives, token for token.
Elsewhere prompts of similar length are left-padded into one batch. A row stops at EOS or
`max_new_tokens` and leaves the batch, so the step's width is the number of rows still
answering. Half of the prompts (by a hash of their id) are answered
greedily, the other half sampled at T = 1, as EAGLE-3's data is; only the sampled rows pay for
a softmax and a draw. Two-turn prompts (ShareGPT) continue with the second user turn after the
target's own first answer; its record is the whole second-turn prompt and answer.

What is kept is small and lasting: per shard of 128 prompts one compressed file of uint16 ids,
    tokens   (sum L,)  uint16   every record's prompt + answer ids, concatenated
    lengths  (R,)      int32    L per record;  starts (R,) int32: index of the first answer id
    turn, temperature, qid, source (R,)         what each record is
written to `distill.ids_dir` (the repository's artifacts/<model>/data/ for the shipped target,
so that a build continues on any machine from the committed shards). The hidden states a
drafter trains on are not stored there: train/states.py recomputes them from the ids by
a teacher-forced forward, only for the layers that drafter needs, into the local cache.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from engines.load import load
from groundfloor.clock import Clock
from groundfloor.errors import UserError
from groundfloor.models import load_generation_config, load_tokenizer
from groundfloor.paths import CONF, ROOT, cache_root
from groundfloor.progress import progress_bar
from groundfloor.prompting import encode, eos_ids
from train.sources import from_config, prompt_sets
from train.states import left_padded, one_call, with_states

SHARD = 128  # prompts per shard file
WHAT_KEYS = ("weights", "seed", "extra_benchmarks")  # settings that change the answers


def data_key(target: str, rows: list[dict], max_new: int, settings: dict) -> str:
    """The folder's key: target, length cap, weights, seed and the first rows. Shard i always
    holds rows [i·SHARD, (i+1)·SHARD) of the (seeded, prefix-stable) selection, so raising or
    lowering `limit` keeps every finished shard. How the answers are computed (engine, kernel,
    device, batch) is recorded in each shard, not keyed: another machine continues the set."""
    what = {k: settings[k] for k in WHAT_KEYS if k in settings}
    h = hashlib.sha256(json.dumps([target, max_new, what], sort_keys=True).encode())
    for r in rows[:SHARD]:
        h.update(json.dumps([r["question_id"], r["turns"]]).encode())
    return h.hexdigest()[:16]


def sampled(prompt_id: str) -> bool:
    """Half the prompts are answered at T = 1, chosen by a hash of the id (stable)."""
    return hashlib.sha256(prompt_id.encode()).digest()[0] % 2 == 1


def prefill_groups(lengths: list[int], tokens: int = 4096, waste: float = 0.1):
    """Index groups of a length-sorted batch to prefill together: consecutive rows while the
    group's padded size stays within `tokens` and its padding within `waste` of it."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    group: list[int] = []
    for i in order:
        w, n = lengths[i], len(group) + 1  # sorted: the newcomer is the longest
        if group and (n * w > tokens or n * w - sum(lengths[j] for j in group) - w > waste * n * w):
            yield group
            group = []
        group.append(i)
    if group:
        yield group


@torch.inference_mode()
def decode_batch(
    engine,
    prompts: list[list[int]],
    max_new: int,
    temps: list[float],
    layers: list[int],
    eos: set[int],
    generator=None,
    stats=None,
) -> list[dict]:
    """Answers for a batch of prompt id lists; with `layers`, also the decode's own hidden
    states at every position (bfloat16), which train/states.py must reproduce. On the one-call
    forward: decode_seqs. Elsewhere rows are left-padded to the longest prompt, position ids
    skipping the padding and the mask hiding it (each row computes what it would alone, up to
    the batch's float reductions); a row that ends leaves (its cache rows are dropped)."""
    if one_call(engine):
        return decode_seqs(engine, prompts, max_new, temps, layers, eos, generator, stats)
    dev = engine.device
    B, W = len(prompts), max(map(len, prompts))
    cache = engine.new_cache(W + max_new + 1, batch=B)
    logits, states, valid = _prefill(engine, prompts, layers, cache, stats)
    live = list(range(B))  # batch row r answers prompt live[r]
    hot = torch.tensor([t > 0 for t in temps], device=dev)
    temp = torch.tensor(temps, device=dev).clamp_min(1e-6)
    lens = torch.tensor([len(p) for p in prompts], device=dev)
    answers = [[] for _ in range(B)]
    for t in range(max_new):
        nxt = _draw(logits, hot[live], temp[live], generator)
        ended = _take(answers, live, nxt, eos, t + 1 == max_new)
        # feed the new tokens (also the last one, for its hidden state when states are kept)
        if ended and not layers:  # rows that ended leave before the next forward
            live, valid, nxt = _leave(cache, live, ended, valid, nxt)
            ended = []
            if not live:
                break
        valid = torch.cat([valid, torch.ones(len(live), 1, dtype=torch.bool, device=dev)], 1)
        pos = lens[torch.tensor(live, device=dev)] + t
        logits = _feed(engine, cache, nxt, pos, valid, layers, [states[b] for b in live], stats)
        if ended:  # with states kept, rows leave only after their last token was fed
            live, valid, logits = _leave(cache, live, ended, valid, logits)
            if not live:
                break
    return [_answer(p, answers[b], states[b], layers) for b, p in enumerate(prompts)]


@torch.inference_mode()
def decode_seqs(
    engine,
    prompts: list[list[int]],
    max_new: int,
    temps: list[float],
    layers: list[int],
    eos: set[int],
    generator=None,
    stats=None,
) -> list[dict]:
    """decode_batch on engine.forward_seqs: each prompt in a cache of its own, so there is no
    padding to compute or mask, and a row that ends simply leaves (nothing is copied). Each
    row's logits and states are the bits of its own forward (the one-call forward's batch
    invariance), so an answer is the one a batch-1 decode gives."""
    dev = engine.device
    caches = [engine.new_cache(len(p) + max_new + 1) for p in prompts]
    states = [{l: [] for l in layers} for _ in prompts]
    logits = _prefill_seqs(engine, prompts, caches, layers, states, stats)
    live = list(range(len(prompts)))
    hot = torch.tensor([t > 0 for t in temps], device=dev)
    temp = torch.tensor(temps, device=dev).clamp_min(1e-6)
    answers = [[] for _ in prompts]
    for t in range(max_new):
        nxt = _draw(logits, hot[live], temp[live], generator)
        ended = {live[r] for r in _take(answers, live, nxt, eos, t + 1 == max_new)}
        # with states kept, a row that ended is fed its last token too (for that token's state)
        fed = [r for r, b in enumerate(live) if layers or b not in ended]
        outs = _seqs_forward(
            engine, [nxt[r : r + 1] for r in fed], [caches[live[r]] for r in fed], layers
        )
        if stats is not None:
            stats["decode"] += len(fed)
        for r, o in zip(fed, outs):
            _keep_states(states[live[r]], o, layers)
        going = [(live[r], o) for r, o in zip(fed, outs) if live[r] not in ended]
        if not going:
            break
        live = [b for b, _ in going]
        logits = torch.stack([o.logits[0, -1] for _, o in going]).float()
        for b in ended:
            caches[b] = None  # its memory goes now, not at the end of the batch
    return [_answer(p, answers[b], states[b], layers) for b, p in enumerate(prompts)]


def _prefill_seqs(engine, prompts, caches, layers, states, stats) -> torch.Tensor:
    """decode_seqs' prefill, groups of ≤ 4,096 tokens a call → each prompt's last logits."""
    last = [None] * len(prompts)
    for group in prefill_groups([len(p) for p in prompts], waste=1.0):
        ids = [torch.tensor(prompts[b], device=engine.device) for b in group]
        for b, o in zip(group, _seqs_forward(engine, ids, [caches[b] for b in group], layers)):
            last[b] = o.logits[0, -1]
            _keep_states(states[b], o, layers)
        if stats is not None:
            stats["prefill"] += sum(len(prompts[b]) for b in group)
    return torch.stack(last).float()


def _seqs_forward(engine, ids: list[torch.Tensor], caches, layers) -> list:
    """One forward of several sequences, each appending `ids[b]` to its own cache."""
    if not ids:
        return []
    return engine.forward_seqs(ids, caches, logits_to_keep=1, hidden=tuple(layers))


def _keep_states(row: dict, out, layers) -> None:
    for l in layers:
        row[l].append(out.hidden[l][0].to(torch.bfloat16).cpu())


def _prefill(engine, prompts, layers, cache, stats):
    """Prefill the batch's prompts into `cache` (left-padded to the longest, length set) →
    (the last position's float logits per row, per row {layer: [its prompt's states]}, the
    cache columns each row sees: (B, W) bool)."""
    dev, W = engine.device, max(map(len, prompts))
    states, logits = [{} for _ in prompts], None
    for group in prefill_groups([len(p) for p in prompts]):
        # prefill a group of similar lengths alone, then place its keys and values right-aligned
        # in the batch's cache: padding costs no compute, and the mask hides the columns between
        ids, pos, mask, _, pad = left_padded([prompts[b] for b in group], dev)
        w = ids.shape[1]
        part = engine.new_cache(w + 1, batch=len(group))
        out = engine.forward(
            ids, part, positions=pos, mask=mask, logits_to_keep=1, hidden=tuple(layers)
        )
        rows = torch.tensor(group, device=dev)
        cache.k[:, rows, :, W - w : W] = part.k[:, :, :, :w]
        cache.v[:, rows, :, W - w : W] = part.v[:, :, :, :w]
        if logits is None:
            logits = out.logits.new_empty(len(prompts), out.logits.shape[-1], dtype=torch.float32)
        logits[rows] = out.logits[:, -1].float()
        for j, b in enumerate(group):
            states[b] = {
                l: [out.hidden[l][j, int(pad[j]) :].to(torch.bfloat16).cpu()] for l in layers
            }
        if stats is not None:
            stats["prefill"] += ids.numel()
    cache.length = W
    valid = (
        torch.arange(W, device=dev)[None]
        >= torch.tensor([W - len(p) for p in prompts], device=dev)[:, None]
    )
    return logits, states, valid


def _feed(engine, cache, nxt, pos, valid, layers, states, stats):
    """One decode step of the live rows: tokens `nxt` at positions `pos` over the visible
    columns `valid`; each row's states (when kept) appended → the next float logits."""
    out = engine.forward(
        nxt[:, None],
        cache,
        positions=pos[:, None],
        mask=valid[:, None, :],
        logits_to_keep=1,
        hidden=tuple(layers),
    )
    if stats is not None:
        stats["decode"] += len(nxt)
    for r, row in enumerate(states):
        for l in layers:
            row[l].append(out.hidden[l][r].to(torch.bfloat16).cpu())
    return out.logits[:, -1].float()


def _take(answers: list, live: list[int], nxt: torch.Tensor, eos: set[int], last: bool) -> list:
    """Each live row's new token appended to its prompt's answer → the rows (indices into
    live) that ended: at an EOS token, or at the last step."""
    ended = []
    for r, (b, tok) in enumerate(zip(live, nxt.tolist())):
        answers[b].append(tok)
        if tok in eos or last:
            ended.append(r)
    return ended


def _draw(logits, hot, temp, generator):
    """Each live row's next token: greedy, or drawn at its temperature where it samples, by
    inverting its CDF at one uniform draw (the first token whose running sum of probabilities
    reaches it: token i with probability p_i). Over this vocabulary torch.multinomial took 32 ms
    for 32 rows, this 0.8 ms."""
    nxt = logits.argmax(-1)
    rows_hot = hot.nonzero()[:, 0]
    if rows_hot.numel():  # draw only for the rows that sample
        p = torch.softmax(logits[rows_hot] / temp[rows_hot, None], -1)
        cdf = p.cumsum(-1)
        u = torch.rand(len(rows_hot), 1, generator=generator, device=p.device) * cdf[:, -1:]
        nxt[rows_hot] = torch.searchsorted(cdf, u)[:, 0].clamp_max(p.shape[-1] - 1)
    return nxt


def _answer(prompt: list[int], answer: list[int], states: dict, layers) -> dict:
    """One row of decode_batch's result: its ids, where the answer starts, its states."""
    row = {"ids": torch.tensor(prompt + answer, dtype=torch.int32), "start": len(prompt)}
    if layers:
        row["hidden"] = {l: torch.cat(states[l])[: len(prompt) + len(answer)] for l in layers}
    return row


def _leave(cache, live: list[int], ended: list[int], *per_row: torch.Tensor):
    """Drop batch rows `ended` from the cache and from each per-row tensor → (live, *per_row)."""
    gone = set(ended)
    keep = [r for r in range(len(live)) if r not in gone]
    if not keep:
        return [], *per_row
    sel = torch.tensor(keep, device=cache.k.device)
    cache.k, cache.v = cache.k[:, sel], cache.v[:, sel]
    return [live[r] for r in keep], *(x[sel] for x in per_row)


def save_ids(rows: list[dict], path: Path, how: dict, prompts: int) -> None:
    """One shard of records (ids, start, id, source, temperature, turn) as compressed uint16."""
    tokens = np.concatenate([r["ids"].numpy() for r in rows]).astype(np.uint16)
    assert tokens.max(initial=0) < 2**16
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(
        tmp,
        tokens=tokens,
        lengths=np.array([len(r["ids"]) for r in rows], np.int32),
        starts=np.array([r["start"] for r in rows], np.int32),
        turn=np.array([r["turn"] for r in rows], np.uint8),
        temperature=np.array([r["temperature"] for r in rows], np.float32),
        qid=np.array([r["id"] for r in rows]),
        source=np.array([r["source"] for r in rows]),
        prompts=np.array(prompts, np.int32),
        how=np.array(json.dumps(how)),
    )
    tmp.rename(path)  # whole or absent: its presence marks the shard complete


def _prompts_in(path: Path) -> int:
    """How many prompts a shard answered (a last shard of a smaller `limit` holds fewer)."""
    return int(np.load(path)["prompts"])


def load_ids(path: Path) -> list[dict]:
    z = np.load(path)
    ends = np.cumsum(z["lengths"])
    tokens = torch.from_numpy(z["tokens"].astype(np.int32))
    out = []
    for i, end in enumerate(ends):
        begin = end - int(z["lengths"][i])
        out.append(
            {
                "ids": tokens[begin:end].clone(),
                "start": int(z["starts"][i]),
                "id": str(z["qid"][i]),
                "source": str(z["source"][i]),
                "temperature": float(z["temperature"][i]),
                "turn": int(z["turn"][i]),
            }
        )
    return out


def ids_folder(key: str, settings: dict) -> Path:
    """Where a data set's id shards live: `ids_dir/<key>` when set (the repository, for the
    shipped target), else the local cache."""
    base = settings.get("ids_dir")
    return (Path(base) if base else cache_root() / "distill") / key


def pick_batch(
    engine, candidates=(16, 32, 48, 64), context: int = 256, rounds: int = 7
) -> tuple[int, dict]:
    """The batch width with the most decoded tokens per second on this machine: one decode step
    of B rows over `context` cached positions, the widths interleaved round by round (so a
    passing disturbance hits them alike), the median of `rounds` after a warm-up round."""
    dev = engine.device
    caches = {B: engine.new_cache(context + 2, batch=B) for B in candidates}
    times: dict[int, list[float]] = {B: [] for B in candidates}
    with torch.inference_mode():
        for rep in range(rounds + 1):
            for B in candidates:
                ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
                pos = torch.full((B, 1), context, device=dev)
                caches[B].length = context
                clock = Clock(dev)
                with clock.phase("other"):
                    engine.forward(ids, caches[B], positions=pos, logits_to_keep=1)
                if rep:
                    times[B].append(clock.read()["other"] / 1e9)
    rates = {B: round(B / max(sorted(t)[len(t) // 2], 1e-9), 1) for B, t in times.items()}
    return max(rates, key=rates.get), rates


def _shards(target: str, rows: list[dict], max_new: int, settings: dict):
    """The data set's folder (its settings.json written), its shard files, and the indices of
    those not yet answered (absent, or answering a different number of prompts)."""
    folder = ids_folder(data_key(target, rows, max_new, settings), settings)
    folder.mkdir(parents=True, exist_ok=True)
    what = {k: settings[k] for k in WHAT_KEYS if k in settings}
    (folder / "settings.json").write_text(
        json.dumps(
            {"target": target, "max_new_tokens": max_new, **what, "shard_prompts": SHARD}, indent=1
        )
        + "\n"
    )
    shards = [folder / f"shard-{i:04d}.npz" for i in range((len(rows) + SHARD - 1) // SHARD)]
    todo = []
    for i, f in enumerate(shards):
        part = rows[i * SHARD : (i + 1) * SHARD]
        if not f.exists() or _prompts_in(f) != len(part):
            todo.append(i)
        elif _answered(f) != {r["question_id"] for r in part}:
            raise UserError(
                f"{f} answers other prompts than shard {i} of this selection: the prompt sources "
                "changed since it was built; restore them, or build the new selection as a set "
                "of its own (more_data)"
            )
    return folder, shards, todo


def _answered(path: Path) -> set[str]:
    """The prompt ids a shard answered (a second turn's record id is its prompt's + /turn2)."""
    return {str(q).split("/turn")[0] for q in np.load(path)["qid"]}


def _answering_engine(target: str, settings: dict, batch, folder: Path):
    """The engine that answers the prompts, as settings ask (auto: the suite's choice), and
    `how` it answers (engine, weights, dtype, kernel, device, caches, batch: each shard records
    it); batch="auto" is a whole shard where each prompt decodes in a cache of its own
    (decode_seqs), else the padded width with the most decoded tokens per second here."""
    how = {k: settings.get(k, "auto") for k in ("engine", "weights", "dtype", "kernel", "device")}
    engine, choice = load(
        target,
        how["device"],
        engine=how["engine"],
        weights=how["weights"],
        dtype=how["dtype"],
        kernel=how["kernel"],
    )
    how.update(engine=choice["engine"], dtype=choice["dtype"], kernel=choice["kernel"])
    how["caches"] = "one per prompt" if one_call(engine) else "padded batch"
    how["sampler"] = "inverse CDF"
    if batch == "auto" and one_call(engine):  # no padding, nothing copied: the whole shard
        batch = SHARD
        _log(folder, f"batch auto: {batch} (a shard at once, each prompt in a cache of its own)")
    elif batch == "auto":
        batch, rates = pick_batch(engine)
        _log(folder, f"batch auto: {batch} (decoded tokens/s by width {rates})")
    how["batch"] = int(batch)
    return engine, how


def build_ids(
    target: str,
    rows: list[dict],
    max_new: int,
    settings: dict,
    batch: int | str = 32,
    progress=None,
) -> tuple[Path, list[Path]]:
    """Answer every shard of `rows` that has no id file yet; returns (folder, shard files)."""
    folder, shards, todo = _shards(target, rows, max_new, settings)
    if not todo:
        return folder, shards
    engine, how = _answering_engine(target, settings, batch, folder)
    batch = how["batch"]
    tok = load_tokenizer(target)
    eos = eos_ids(tok, engine.config, load_generation_config(target))
    flops = 2 * projection_params(engine.config)
    task = (
        progress.add_task("distill", total=len(shards), completed=len(shards) - len(todo))
        if progress
        else None
    )
    t0, tokens = time.time(), 0
    for n, s in enumerate(todo, 1):
        # a shard's own seed, so a resumed or moved build draws what it would have in one go
        gen = torch.Generator(device=engine.device).manual_seed(
            int(settings.get("seed", 0)) * 100003 + s
        )
        stats = {"prefill": 0, "decode": 0}
        t_shard = time.time()
        part = rows[s * SHARD : (s + 1) * SHARD]
        seqs = answer_shard(engine, tok, eos, part, max_new, int(batch), gen, stats)
        save_ids(seqs, shards[s], how, len(part))
        dt = time.time() - t_shard
        new = sum(len(x["ids"]) - x["start"] for x in seqs)
        tokens += new
        rate = tokens / max(time.time() - t0, 1e-9)
        eta = (time.time() - t0) / n * (len(todo) - n)
        where = f"shard {s + 1}/{len(shards)}: "
        _log(folder, where + _shard_line(new, dt, stats, flops, tokens, rate, eta))
        if progress:
            progress.update(task, advance=1, description=f"distill {rate:.0f} answer tok/s")
    return folder, shards


def _shard_line(new: int, dt: float, stats: dict, flops: int, tokens: int, rate, eta) -> str:
    """A shard's line of the build log: its answer tokens and rate, the token-forwards they
    took, the projections' GFLOP/s, and the run's total, rate and time left."""
    work = stats["prefill"] + stats["decode"]
    return (
        f"{new} answer tokens in {dt:.0f} s "
        f"({new / dt:.0f}/s; token-forwards {stats['prefill']} prefill + "
        f"{stats['decode']} decode = {work / max(new, 1):.2f} per answer token, "
        f"{flops * work / dt / 1e9:.0f} GFLOP/s in the projections); this run "
        f"{tokens} at {rate:.0f}/s, ETA {eta / 60:.0f} min"
    )


def projection_params(config) -> int:
    """Weights one token multiplies through: every layer's projections and the output layer
    (2 FLOP each per token; attention over the context comes on top)."""
    h, n = int(config.hidden_size), int(config.num_hidden_layers)
    hd = int(getattr(config, "head_dim", None) or h // config.num_attention_heads)
    q, kv = int(config.num_attention_heads) * hd, int(config.num_key_value_heads) * hd
    layer = h * (q + 2 * kv) + q * h + 3 * h * int(config.intermediate_size)
    return n * layer + h * int(config.vocab_size)


def _log(folder: Path, line: str) -> None:
    with open(folder / "progress.log", "a") as log:  # readable without a terminal
        log.write(time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n")


def build(
    target: str,
    rows: list[dict],
    max_new: int,
    layers: list[int],
    settings: dict,
    batch: int | str = 16,
    progress=None,
    need: list[int] | None = None,
    states_engine: dict | None = None,
    lazy: bool = False,
) -> list[dict]:
    """The distillation set for `rows`: ids answered where missing (build_ids), then the hidden
    states of `need` (default: `layers`) recomputed from them where the local cache lacks them,
    by the engine `settings` name with `states_engine`'s keys in place of theirs (e.g.
    {"weights": "auto"}: the states of the target as it is benchmarked, whatever answered):
    up front, or with `lazy` shard by shard as training first reads them (states.with_states)."""
    folder, shards = build_ids(target, rows, max_new, settings, batch, progress)
    seqs = [seq for f in shards for seq in load_ids(f)]
    need = layers if need is None else need
    how = {**settings, **(states_engine or {})}
    return with_states(target, folder.name, shards, seqs, need, how, progress, lazy)


def answer_shard(
    engine, tok, eos, part: list[dict], max_new: int, batch: int, gen, stats=None
) -> list[dict]:
    """One shard: first turns in length-sorted batches, then the second turns of two-turn rows."""
    out: list[dict | None] = [None] * len(part)
    msgs = [[{"role": "user", "content": r["turns"][0]}] for r in part]
    for turn in (0, 1):
        idx = [i for i, r in enumerate(part) if len(r["turns"]) > turn]
        enc = {i: encode(tok, msgs[i], True) for i in idx}
        idx.sort(key=lambda i: len(enc[i]))
        for b in range(0, len(idx), batch):
            chunk = idx[b : b + batch]
            temps = [1.0 if sampled(part[i]["question_id"]) else 0.0 for i in chunk]
            seqs = decode_batch(
                engine, [enc[i] for i in chunk], max_new, temps, [], eos, gen, stats
            )
            for i, seq, t in zip(chunk, seqs, temps):
                seq.update(
                    id=part[i]["question_id"] + (f"/turn{turn + 1}" if turn else ""),
                    source=part[i].get("source", "templated"),
                    temperature=t,
                    turn=turn,
                )
                if turn == 0:
                    out[i] = seq
                    answer = tok.decode(
                        seq["ids"][seq["start"] :].tolist(), skip_special_tokens=True
                    )
                    msgs[i] = (
                        msgs[i]
                        + [
                            {"role": "assistant", "content": answer},
                            {"role": "user", "content": part[i]["turns"][1]},
                        ]
                        if len(part[i]["turns"]) > 1
                        else msgs[i]
                    )
                else:
                    out.append(seq)
    return [s for s in out if s is not None]


def batch_of(cfg) -> int | str:
    b = cfg.distill.batch
    return "auto" if str(b) == "auto" else int(b)


def settings_of(cfg) -> dict:
    d = cfg.distill
    out = {
        "engine": str(d.engine),
        "weights": str(d.weights),
        "dtype": str(d.dtype),
        "kernel": str(d.kernel),
        "device": str(d.device),
        "seed": int(cfg.seed),
    }
    if d.get("ids_dir"):
        out["ids_dir"] = str(d.ids_dir)
    elif str(cfg.target).startswith("embedded:"):  # the shipped target's ids live in the repo
        out["ids_dir"] = str(ROOT / "artifacts" / str(cfg.target).split(":", 1)[1] / "data")
    extra = cfg.get("extra_benchmarks") or []
    if extra:  # another selection of prompts: data of its own
        out["extra_benchmarks"] = sorted(str(p) for p in extra)
    return out


def main() -> None:
    """`python -m train.distill [key=value ...]`: build the ids of conf/train.yaml."""
    import sys

    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=sys.argv[1:])
        for part in prompt_sets(cfg):
            rows, stats = from_config(part)
            print(json.dumps(stats, indent=1), file=sys.stderr)
            with progress_bar(transient=False, remaining=True) as progress:
                t0 = time.time()
                folder, _ = build_ids(
                    str(cfg.target),
                    rows,
                    int(cfg.max_new_tokens),
                    settings_of(part),
                    batch_of(part),
                    progress,
                )
            print(f"distillation ids ready in {folder} ({time.time() - t0:.0f} s)", file=sys.stderr)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
