"""Speculative decoding methods: one file each, plus one YAML in `conf/method/`.

    ar, ngram, draft, medusa, eagle, eagle3, suffix, sam, recycling, lookahead, oracle   methods
    hf_ar, hf_pld, hf_assisted (on hf_generate)   transformers' own generate() modes, as peers
    base         what a method is: Proposal, Accepted, Method, TreeMethod
    registry     a method built from its YAML and the run's Context
    knobs        a method's knobs as typed fields (and `need`, one line for a bad one)
    sizing       which draft-size policy a method holds (auto/: k=auto's and a fixed k's)
    budget       tree nodes per round from the engine's timed cost curve
    static_trees static tree shapes as data
    treeverify   one target forward over a token tree, and the accepted path kept

To add a method `foo`:
1. `methods/foo.py`: subclass `methods.base.Method`, set `name = "foo"`, override `draft`
   (and `prefill`, `accept`, `verify` if the drafter keeps state). A method that drafts a tree
   (or a chain it wants verified as one) subclasses `methods.base.TreeMethod`, returns a
   `TreeProposal` and inherits the shared verify and accept; `after_accept` reads the forward.
   Its draft size is a policy it always holds (`self.policy`, methods.sizing): a chain method
   sets `self.policy = sizing.chain(self)` and asks `self.policy.length()` each round; a tree
   method builds its pair once (k=auto's methods.auto.TreeChooser or NodeRates, a fixed k's
   FixedTree) and asks it the same questions either way; the base class calibrates and
   feeds it. Nothing branches on which policy it is.
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
