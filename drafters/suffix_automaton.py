"""A suffix automaton over token sequences: the index behind `suffix` and `sam`.

The suffix automaton of a sequence T (Blumer et al. 1985) is the smallest automaton accepting
every substring of T. Each state is a class of substrings with the same end positions
endpos(s) = {e : T[e − |s| + 1 .. e] = s}; its strings are the suffixes of its longest one with
lengths in (len(link), len]. It has at most 2|T| states and is built online, one token at a
time, in amortised O(1). Per state:

    length  len(v), its longest string          link   suffix link (the next shorter class)
    trans   token → state                       first  min endpos(v): where v's strings first end
    count   |endpos(v)|, the occurrences of v's strings (kept when `count_depth` is set)

Appending T[e] adds e to the endpos of every class on the suffix-link chain of the new state.
Counting walks that chain, but only from the class of the length-`count_depth` suffix down
(a class is tracked from there on), so `count` is exact for every class whose shortest string
has at most `count_depth` tokens, at O(count_depth) per token even on one token repeated.

Several sequences share one automaton when separated by tokens found nowhere else
(`extend_separated` uses negative ids), so that no match spans two sequences.

What the methods read:
- `count(trans(v, x)) / count(v)`: how often v's strings continue with x (suffix decoding);
- `first(link(end))`: where the longest suffix of T that occurred before first ended, so that
  T[first + 1 ..] continues it (SAM decoding).
"""

from __future__ import annotations

import sys


class SuffixAutomaton:
    """Online suffix automaton of one token sequence (or several, separated)."""

    def __init__(self, tokens=(), count_depth: int | None = None):
        self.length = [0]
        self.link = [-1]
        self.trans: list[dict[int, int]] = [{}]
        self.first = [-1]
        self.count = [0]
        self.tokens: list[int] = []
        self.end = 0  # state of the whole sequence
        self.count_depth = count_depth
        self.deep = (0, 0)  # (state, length) of the suffix of length min(count_depth, |T|)
        self._separator = -1
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def states(self) -> int:
        return len(self.length)

    def _new(self, length: int, link: int, trans: dict, first: int, count: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.trans.append(trans)
        self.first.append(first)
        self.count.append(count)
        return len(self.length) - 1

    def append(self, x: int) -> None:
        e = len(self.tokens)
        self.tokens.append(x)
        cur = self._new(self.length[self.end] + 1, 0, {}, e, 0)
        p = self.end
        while p != -1 and x not in self.trans[p]:
            self.trans[p][x] = cur
            p = self.link[p]
        if p != -1:
            q = self.trans[p][x]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:  # split q: the clone takes its strings of length ≤ len(p) + 1
                clone = self._new(
                    self.length[p] + 1,
                    self.link[q],
                    dict(self.trans[q]),
                    self.first[q],
                    self.count[q],
                )
                while p != -1 and self.trans[p].get(x) == q:
                    self.trans[p][x] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.end = cur
        if self.count_depth is not None:
            self._count(x)

    def _count(self, x: int) -> None:
        """Add the new end position to the classes of the suffixes of length ≤ count_depth."""
        w, n = self.deep
        keep = min(n, self.count_depth - 1)  # the old suffix that x extends
        if keep == 0:
            w = 0
        else:
            while self.length[self.link[w]] >= keep:  # (w may have been split this step)
                w = self.link[w]
        w = self.trans[w][x]
        self.deep = (w, keep + 1)
        while w > 0:
            self.count[w] += 1
            w = self.link[w]

    def extend(self, tokens) -> None:
        for x in tokens:
            self.append(int(x))

    def extend_separated(self, tokens) -> None:
        """Add a sequence after a fresh separator: matches never span two sequences."""
        self.append(self._separator)
        self._separator -= 1
        self.extend(tokens)

    def walk(self, tokens, v: int = 0) -> int:
        """The state reached from v by reading tokens, or −1 when that string does not occur."""
        for x in tokens:
            v = self.trans[v].get(int(x), -1)
            if v < 0:
                return -1
        return v

    def match(self, tokens, v: int = 0, n: int = 0) -> tuple[int, int]:
        """The longest suffix of (a string of length n in state v) + tokens that occurs in T:
        → (its state, its length). Matching statistics, amortised O(1) per token."""
        for x in tokens:
            x = int(x)
            while v and x not in self.trans[v]:
                v = self.link[v]
                n = self.length[v]
            if x in self.trans[v]:
                v, n = self.trans[v][x], n + 1
            else:
                v, n = 0, 0
        return v, n

    def suffix_states(self, v: int, n: int, longest: int) -> list[tuple[int, int]]:
        """[(m, state of its length-m suffix)] for m = 1..min(n, longest), given the state v of
        a string of length n that occurs: the shorter suffixes lie up the suffix-link chain."""
        out = []
        for m in range(min(n, longest), 0, -1):
            while self.length[self.link[v]] >= m:
                v = self.link[v]
            out.append((m, v))
        return out[::-1]

    def children(self, v: int) -> list[tuple[int, int]]:
        """[(token, state)]: continuations of v's strings, most frequent first (ties: lower id);
        separators are not continuations."""
        kids = [(x, u) for x, u in self.trans[v].items() if x >= 0]
        kids.sort(key=lambda t: (-self.count[t[1]], t[0]))
        return kids

    def nbytes(self) -> int:
        """Approximate bytes held: the per-state lists and transition dicts."""
        lists = (self.length, self.link, self.trans, self.first, self.count, self.tokens)
        return (
            sum(sys.getsizeof(a) for a in lists)
            + sum(sys.getsizeof(d) for d in self.trans)
            + 28 * 4 * self.states
        )  # ints above 256 are objects of their own
