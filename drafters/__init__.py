"""Drafter networks and their checkpoint layouts, shared by the methods and the training code.

    eagle        EAGLE-1/2 and EAGLE-3 heads (published layouts)
    medusa       Medusa heads (Medusa's published layout)
    draftmodel   the distilled draft model (target embeddings shared, few layers, small head)
    draftvocab   a frequency-ranked draft vocabulary over the target's output layer

They run on the target's engine (engines/): features and embeddings come from it, in its
activation dtype. `methods/` imports from here, never from the training package.
"""
