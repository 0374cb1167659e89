"""A training schedule that outlives a sitting: the step count, the learning-rate schedule and the
place in the data persist in a head's train_summary.json (`schedule`), and the next sitting, on
any machine, continues them.

    schedule=new       (default) this sitting's own schedule: a linear warm-up, then a cosine
                       over drafter.steps, the data from its first batch
    schedule=continue  with drafter.init: the init head's schedule goes on. Its cosine runs
                       over `total` steps (`epochs` × the batches of one epoch,
                       fixed when the schedule began), from the step the head reached, at the
                       schedule's peak rate; the data stream goes on from the epoch and batch
                       it reached. drafter.steps is this sitting's length (it stops at
                       `total`). A head without a schedule (trained before it existed) begins
                       one at step 0.

AdamW's moments are not kept with a head (they would double its size in the tree, and they are
one run's): a continuing sitting starts them at zero and re-warms, its rate ramping linearly over
`warmup` steps up to the schedule's, as a first sitting does. A checkpoint inside a sitting still
resumes exactly (train/loop.py). The data stream can go on only over the same training sequences
in the same order with the same seed and batch size (`data`: their key); other data is one line,
and so is a schedule already at its end (a head trained with schedule=new has one).
Each sitting appends a record (its steps, held-out loss, CPU, precision, seconds) to `sittings`:
the held-out curve across sittings, by which a long schedule is judged to have stopped paying.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from groundfloor.errors import UserError

KINDS = ("new", "continue")


@dataclass
class Schedule:
    total: int  # optimizer steps of the whole schedule
    lr: float  # its peak learning rate
    warmup: int  # steps of linear warm-up at the start of every sitting
    step: int = 0  # steps the schedule had taken before this sitting
    epoch: int = 0  # where the data stream stood: the epoch ...
    taken: int = 0  # ... and the batches already taken from it
    data: str = ""  # the training sequences' key (data_key)
    sittings: list = field(default_factory=list)

    @classmethod
    def fresh(cls, steps: int, lr: float, warmup: int, data: str = "") -> Schedule:
        return cls(total=max(int(steps), 1), lr=float(lr), warmup=max(int(warmup), 1), data=data)

    def factor(self, s: int) -> float:
        """The rate's multiple of `lr` at this sitting's step s (from 0): the re-warm ramp times
        the cosine at the schedule's step (a first sitting's: warm-up, then cosine)."""
        g = min(self.step + s, self.total)
        return min(1.0, (s + 1) / self.warmup) * 0.5 * (1 + math.cos(math.pi * g / self.total))

    def left(self) -> int:
        return max(self.total - self.step, 0)

    def after(self, steps: int, epoch: int, taken: int, sitting: dict) -> dict:
        """The schedule as the next sitting reads it: this one's steps, stream place and record
        added."""
        rec = {"from_step": self.step, "to_step": self.step + steps, **sitting}
        return asdict(self) | {
            "step": self.step + steps,
            "epoch": epoch,
            "taken": taken,
            "sittings": [*self.sittings, rec],
        }


def data_key(train_ids: list[str], seed: int, batch_size: int) -> str:
    """The key of a training stream: its sequences' ids in order, the seed, the batch size."""
    h = hashlib.sha256(f"{seed}|{batch_size}|".encode())
    for i in train_ids:
        h.update(f"{i}\n".encode())
    return h.hexdigest()[:16]


def epoch_batches(train_count: int, batch_size: int) -> int:
    return max(math.ceil(train_count / max(batch_size, 1)), 1)


def plan(kind: str, init: str | None, steps: int, lr: float, warmup: int, epochs: float,
         batches: int, data: str) -> tuple[Schedule, str]:  # fmt: skip
    """(this sitting's schedule, a line saying what it continues): `kind` new or continue (module
    docstring); `batches` in one epoch of the training split."""
    if kind not in KINDS:
        raise UserError(f"schedule={kind!r} is not valid; choose one of: {', '.join(KINDS)}")
    if kind == "new":
        return Schedule.fresh(steps, lr, warmup, data), f"schedule: new, {steps} steps"
    if not init:
        raise UserError("schedule=continue needs drafter.init: the head whose schedule goes on")
    had = read(Path(init))
    if had is None:
        total = max(math.ceil(float(epochs) * batches), 1)
        s = Schedule.fresh(total, lr, warmup, data)
        return s, (
            f"schedule: begun at {init} (it had none): {total} steps = {epochs} epochs of "
            f"{batches} batches, peak lr {lr}"
        )
    if had.data != data:
        raise UserError(
            f"schedule=continue: {init}'s schedule streamed other training data (key "
            f"{had.data}, this run's {data}: other prompts, limits, seed or batch size); give its "
            "settings, or schedule=new"
        )
    if not had.left():
        raise UserError(
            f"schedule=continue: {init}'s schedule is done ({had.step} of {had.total} steps); "
            "schedule=new begins another"
        )
    had.warmup = max(int(warmup), 1)
    line = (
        f"schedule: continued from {init} at step {had.step} of {had.total} (epoch {had.epoch}, "
        f"batch {had.taken}), peak lr {had.lr} (drafter.lr is the schedule's), moments re-warmed "
        f"over {had.warmup} steps"
    )
    return had, line


def read(head: Path) -> Schedule | None:
    """The schedule a head's train_summary.json keeps, or None."""
    path = head / "train_summary.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text()).get("schedule")
    return Schedule(**saved) if saved else None
