"""Hidden states for drafter training, recomputed from the committed token ids.

The ids of a distillation set are small and kept in the repository (train/distill.py); the
states a drafter learns from are ~9 GB per million answer tokens and are not. They are rebuilt
here by one teacher-forced forward per batch of records (left-padded, the padding masked, as in
the decode), only for the layers a drafter uses (draft model: none; Medusa and EAGLE-2: the last,
after the final norm; EAGLE-3: its three), and cached locally:

    $SPECSWEEP_CACHE/distill/<data key>/states-<engine key>/shard-NNNN.h<layer>.pt
        a list over the shard's records of (L, H) bfloat16 tensors, L = len(ids)

Training maps these files rather than reading them (torch.load's mmap): a layer takes 1.15 GB
per million tokens of prompt and answer, so EAGLE-3's four over every set outgrow the machine's
memory, and a batch reads only its own records' rows. Training computes a shard the cache lacks
on the fly, when a batch first reads one of its records (with_states(lazy=True)), and writes its
files then: a run on a new machine starts in minutes instead of after the whole build (~45 s a
shard on two cores), and the next pass maps what the first wrote. The shard's states are the
same call's over the same records either way, so the files are the same bits.

Whose states: the engine keys (engine, weights, dtype, kernel, device) name the target that
computes them, and key the folder, so the 16-bit copy's states (weights=bfloat16, the training
default: `states_target` in conf/train.yaml) and the shipped 4-bit file's (weights=auto) never
mix.

A teacher-forced forward computes, position by position, what the decode computed one token at a
time; they agree up to the float reductions of different batch shapes (tests/test_states.py).
A record whose ids begin a later turn of its conversation (turn 1's prompt and answer, when the
second turn's prompt repeats them token for token) is not forwarded: a causal model's states of
a prefix are the prefix of its states, so they are cut from the later turn's (~18% of the tokens
of the shipped data).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from groundfloor.paths import cache_root

BATCH_TOKENS = 4096  # padded tokens per teacher-forced forward


def left_padded(prompts: list[list[int]], dev):
    """ids (B, W) left-padded, positions skipping the padding, the prefill mask and validity."""
    B, W = len(prompts), max(map(len, prompts))
    pad = torch.tensor([W - len(p) for p in prompts], device=dev)
    ids = torch.zeros(B, W, dtype=torch.long, device=dev)
    for b, p in enumerate(prompts):
        ids[b, W - len(p) :] = torch.tensor(p, device=dev)
    cols = torch.arange(W, device=dev)
    valid = cols[None] >= pad[:, None]  # (B, W) key is a real token
    pos = (cols[None] - pad[:, None]).clamp_min(0)
    causal = cols[:, None] >= cols[None, :]
    # real keys only; a padding row sees itself, so its (unused) output stays finite
    mask = causal[None] & (valid[:, None, :] | torch.eye(W, dtype=torch.bool, device=dev)[None])
    return ids, pos, mask, valid, pad


def one_call(engine) -> bool:
    """Whether the engine runs several sequences, each in a cache of its own, as one forward
    (the lean engine's native path): then the decode (train.distill.decode_seqs) and the
    teacher-forced forward here give each sequence the bits of its own forward."""
    rows = getattr(engine, "one_call_rows", None)
    return bool(rows and rows())


@torch.inference_mode()
def teacher_forced(engine, seqs: list[torch.Tensor], layers: list[int]) -> list[dict]:
    """{layer: (L, H) bfloat16} per id sequence, from one forward over all of them: on the
    one-call forward each in a cache of its own (its states are then, bit for bit, those its
    decode computed row by row), elsewhere left-padded."""
    dev = engine.device
    if one_call(engine):
        outs = engine.forward_seqs(
            [s.to(dev).long() for s in seqs],
            [engine.new_cache(len(s) + 1) for s in seqs],
            logits_to_keep=1,
            hidden=tuple(layers),
        )
        return [{l: o.hidden[l][0].to(torch.bfloat16).cpu() for l in layers} for o in outs]
    ids, pos, mask, _, pad = left_padded([s.tolist() for s in seqs], dev)
    cache = engine.new_cache(ids.shape[1] + 1, batch=len(seqs))
    out = engine.forward(
        ids, cache, positions=pos, mask=mask, logits_to_keep=1, hidden=tuple(layers)
    )
    return [
        {l: out.hidden[l][b, int(pad[b]) :].to(torch.bfloat16).cpu() for l in layers}
        for b in range(len(seqs))
    ]


def prefix_hosts(recs: list[dict]) -> dict[int, int]:
    """{j: i}: record j's ids are a prefix of record i's, i not itself such a prefix. A turn-n
    record is named "<id>/turn<n>" (n ≥ 2) after its conversation's first turn "<id>"."""
    at = {r["id"]: j for j, r in enumerate(recs)}
    inside: dict[int, int] = {}
    for i, r in enumerate(recs):
        base, sep, n = r["id"].rpartition("/turn")
        if not sep or not n.isdigit():
            continue
        j = at.get(base if n == "2" else f"{base}/turn{int(n) - 1}")
        if j is None:
            continue
        a, b = recs[j]["ids"], r["ids"]
        if len(a) <= len(b) and torch.equal(b[: len(a)], a):
            inside[j] = i
    out = {}
    for j, i in inside.items():
        while i in inside:  # turn 1 inside turn 2 inside turn 3: cut from the last
            i = inside[i]
        out[j] = i
    return out


def _batches(lengths: list[int]):
    """Length-sorted groups of record indices, at most BATCH_TOKENS padded tokens each."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    group: list[int] = []
    for i in order:
        if group and (len(group) + 1) * lengths[i] > BATCH_TOKENS:
            yield group
            group = []
        group.append(i)
    if group:
        yield group


ENGINE_KEYS = ("engine", "weights", "dtype", "kernel", "device")  # what computes the states


def engine_key(settings: dict) -> str:
    """The states folder's key: the engine, weights (the 16-bit copy, the shipped 4-bit file...),
    dtype, kernel and device the states are computed with."""
    how = {k: settings.get(k, "auto") for k in ENGINE_KEYS}
    return hashlib.sha256(json.dumps(how, sort_keys=True).encode()).hexdigest()[:8]


def with_states(
    target: str,
    key: str,
    shards: list[Path],
    seqs: list[dict],
    layers: list[int],
    settings: dict,
    progress=None,
    lazy: bool = False,
) -> list[dict]:
    """`seqs` (the records of `shards`, in order) with `hidden` {layer: (L, H)} added, each
    layer loaded from the local cache or recomputed shard by shard from the ids: every missing
    shard now (up front), or with `lazy` each when a record of it is first read (on the fly:
    training starts at once and writes the cache as its first pass goes; a later pass, or run,
    maps the files). Either way a shard is computed by the same call over the same records
    (_shard_states), so its file holds the same bits."""
    for s in seqs:
        s["hidden"] = {}
    if not layers:
        return seqs
    folder = cache_root() / "distill" / key / f"states-{engine_key(settings)}"
    folder.mkdir(parents=True, exist_ok=True)
    per_shard = _split(seqs, shards)
    missing = [i for i, f in enumerate(shards) if not _cached(folder, f, layers)]
    task = (
        progress.add_task("states", total=len(shards), completed=len(shards) - len(missing))
        if progress and missing
        else None
    )
    builder = _Builder(target, settings, layers, folder, progress, task)
    for i in missing:
        if lazy:
            shard = _Shard(shards[i], per_shard[i], builder)
            for j, rec in enumerate(per_shard[i]):
                rec["hidden"] = LazyStates(shard, j)
        else:
            builder.build(shards[i], per_shard[i])
    for i, f in enumerate(shards):  # mapped, not read: the OS pages in what a batch touches
        if not (lazy and i in missing):
            _attach(per_shard[i], _load_shard(folder, f, layers))
    if not lazy:
        builder.done()
    return seqs


TALLY = {"shards": 0, "tokens": 0, "seconds": 0.0}  # states computed by this process


class _Builder:
    """Computes shards' states into the cache: the engine `settings` name, loaded at the first
    shard it computes and let go once every shard it was given is done."""

    def __init__(self, target: str, settings: dict, layers, folder: Path, progress, task):
        self.target, self.settings, self.layers, self.folder = target, settings, layers, folder
        self.progress, self.task = progress, task
        self.engine, self.t0, self.tokens, self.pending = None, None, 0, 0

    def build(self, shard: Path, recs: list[dict]) -> None:
        """The shard's states computed and written, a file per layer."""
        if self.engine is None:
            from engines.load import load  # cost: on a miss only; test_states patches its load

            how = {k: self.settings.get(k, "auto") for k in ENGINE_KEYS[:-1]}
            self.engine, _ = load(self.target, self.settings.get("device", "cpu"), **how)
        t = time.time()
        self.t0 = self.t0 or t
        got = _shard_states(self.engine, recs, self.layers)
        for l in self.layers:  # whole or absent: a file's presence marks its layer complete
            _save_atomic([g[l] for g in got], _state_file(self.folder, shard, l))
        n = sum(len(r["ids"]) for r in recs)
        self.tokens += n
        TALLY.update(
            shards=TALLY["shards"] + 1,
            tokens=TALLY["tokens"] + n,
            seconds=TALLY["seconds"] + time.time() - t,
        )
        if self.task is not None:
            rate = self.tokens / max(time.time() - self.t0, 1e-9)
            self.progress.update(self.task, advance=1, description=f"states {rate:.0f} tok/s")

    def done(self) -> None:
        self.engine = None  # its memory goes back: no shard of this set is left to compute


class _Shard:
    """A shard whose states the cache lacked: computed (by its builder) when a record's are
    first read, then mapped from the files like a cached shard's."""

    def __init__(self, path: Path, recs: list[dict], builder: _Builder):
        self.path, self.recs, self.builder, self.loaded = path, recs, builder, None
        builder.pending += 1

    def states(self) -> list[dict]:
        if self.loaded is None:
            b = self.builder
            if not _cached(b.folder, self.path, b.layers):  # another run may have written it
                # training's RNG and autocast stay as they were: the target's forward in its own
                # dtype, the head's next draws the ones a cached run takes
                with torch.random.fork_rng(devices=[]), torch.autocast("cpu", enabled=False):
                    b.build(self.path, self.recs)
            self.loaded = _load_shard(b.folder, self.path, b.layers)
            _attach(self.recs, self.loaded)
            b.pending -= 1
            if not b.pending:
                b.done()
        return self.loaded


class LazyStates(Mapping):
    """A record's `hidden` while its shard's states are not yet computed: its layers are known
    (iterating reads nothing); a layer's tensor is its shard's, computed at the first read."""

    def __init__(self, shard: _Shard, index: int):
        self.shard, self.index = shard, index

    def __getitem__(self, layer: int) -> torch.Tensor:
        if layer not in self.shard.builder.layers:
            raise KeyError(layer)
        return self.shard.states()[self.index][layer]

    def __contains__(self, layer) -> bool:
        return layer in self.shard.builder.layers

    def __iter__(self):
        return iter(self.shard.builder.layers)

    def __len__(self) -> int:
        return len(self.shard.builder.layers)


def _cached(folder: Path, shard: Path, layers: list[int]) -> bool:
    return all(_state_file(folder, shard, l).exists() for l in layers)


def _load_shard(folder: Path, shard: Path, layers: list[int]) -> list[dict]:
    """{layer: (L, H)} per record of the shard, mapped from its cache files."""
    per_layer = {l: torch.load(_state_file(folder, shard, l), mmap=True) for l in layers}
    n = len(next(iter(per_layer.values())))
    return [{l: per_layer[l][j] for l in layers} for j in range(n)]


def _attach(recs: list[dict], loaded: list[dict]) -> None:
    for rec, h in zip(recs, loaded):
        rec["hidden"] = h


def _shard_states(engine, recs: list[dict], layers: list[int]) -> list[dict]:
    """Each record's states {layer: (L, H)}, teacher-forced in batches of similar lengths; a
    record that is a prefix of another (prefix_hosts) takes the first rows of its host's."""
    got: list[dict | None] = [None] * len(recs)
    host = prefix_hosts(recs)
    todo = [j for j in range(len(recs)) if j not in host]
    for group in _batches([len(recs[j]["ids"]) for j in todo]):
        group = [todo[g] for g in group]
        for j, st in zip(group, teacher_forced(engine, [recs[j]["ids"] for j in group], layers)):
            got[j] = st
    for j, h in host.items():
        n = len(recs[j]["ids"])
        got[j] = {l: got[h][l][:n].clone() for l in layers}
    return got


def _save_atomic(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.rename(path)


def _state_file(folder: Path, shard: Path, layer: int) -> Path:
    return folder / f"{shard.stem}.h{layer}.pt"


def _split(seqs: list[dict], shards: list[Path]) -> list[list[dict]]:
    """seqs grouped by the shard they came from (load order: shard by shard)."""
    import numpy as np

    out, at = [], 0
    for f in shards:
        n = len(np.load(f)["lengths"])
        out.append(seqs[at : at + n])
        at += n
    return out
