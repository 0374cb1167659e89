"""Drafter networks and their checkpoint layouts, shared by the methods and the training code.

    eagle        EAGLE-1/2 and EAGLE-3 heads (published layouts)
    eagle_native an EAGLE head's drafting step with its decoder layer as one native call
    headcache    the KV cache of an EAGLE head's own layer
    medusa       Medusa heads (Medusa's published layout)
    draftmodel   the distilled draft model (target embeddings shared, few layers, small head)
    draftvocab   a frequency-ranked draft vocabulary over the target's output layer
    selfdraft    the target's own 4-bit copy as its draft model
    storage      our drafters' weight files (safetensors, int8 where chosen)
    weights      drafters' linear layers in int8 on the native CPU kernels, where it pays
    suffix_automaton  the suffix automaton behind `suffix` and `sam`

They run on the target's engine (engines/): features and embeddings come from it, in its
activation dtype. `methods/` imports from here, never from the training package.
"""
