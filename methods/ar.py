"""`ar`: the autoregressive baseline, on the same loop, cache and sampling code as every method.

A round drafts nothing and verifies one token, so τ = 1 by construction.
"""

from methods.base import Method


class AR(Method):
    name = "ar"
