"""`eagle3`: the EAGLE-2 dynamic-tree round (methods.eagle) with an EAGLE-3 head.

The head fuses three target layers (low, middle, high) into its feature, was trained on its own
unrolled predictions, and drafts over a reduced vocabulary mapped to target ids by `d2t`
(drafters.eagle). Default head: model.eagle3.
"""

from __future__ import annotations

from methods.eagle import Eagle


class Eagle3(Eagle):
    name = "eagle3"
    kind = "eagle3"
