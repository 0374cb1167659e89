"""Speculative decoding methods: one file each, plus one YAML in `conf/method/`.

To add a method `foo`:
1. `methods/foo.py`: subclass `methods.base.Method`, set `name = "foo"`, override `draft`
   (and `prefill`, `accept`, `verify` if the drafter keeps state). A method that drafts a tree
   (or a chain it wants verified as one) subclasses `methods.base.TreeMethod`, returns a
   `TreeProposal` and inherits the shared verify and accept; `after_accept` reads the forward.
   For k=auto a chain method calls `self.chain_k()`; a tree method names its policy in the
   class attribute `policy` (methods.auto.TreeChooser or NodeRates) and calls
   `self.use_auto(...)` with its sizes: the base class builds, calibrates and feeds it.
   Keep per-turn state in `state.aux`; state that outlives a turn (a cross-request cache) on
   the method object, updated in `finish`; never time anything; never decide when to stop.
2. `conf/method/foo.yaml`: `_target_: methods.foo.Foo`, `name: foo`, `k: <default>`, knobs,
   and the `_test` block (a bad-input case per knob; docs/recipes.md).
   Read the knobs as typed fields: a frozen dataclass `FooKnobs` (types, no defaults) and
   `kn = methods.knobs.read(cfg, FooKnobs)` in `__init__`; a wrong type is refused in one line.
A method stands on the floors below it only: `groundfloor` (sampling rules, tree vocabulary,
state, errors), `engines` (the target's forward and cache) and `drafters` (drafter networks);
never on `bench` (import-linter fails `make test` on such an import). It is built by
`methods.registry.build_method(name_or_cfg, ctx)` from its YAML, for the run, SAM's fallback and
the tests alike (a partial node is completed from that YAML); its knobs' defaults are written
once, there.
Then `python -m bench method=foo` runs it against the interleaved `ar` baseline; docs/recipes.md
lists what else finds it on its own; its tests' bad-knob cases and tiny-model knobs are the
`_test` block of its YAML.
A peer implemented elsewhere that decodes a whole turn itself (transformers' `generate()`:
`hf_pld`, `hf_assisted`) subclasses `methods.hf_generate.HFGenerate` instead and names its
`generate()` arguments; `bench.decode.wholeturn` runs it under the same clock, budget and verdict.
"""
