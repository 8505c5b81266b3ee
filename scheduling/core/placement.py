"""Choosing a node and devices for one task: predicates, policy scores, tie-break.

Scores are cached per task shape and recomputed only for nodes whose version changed since,
so placing thousands of tasks on a thousand nodes costs a few small array operations per task.
Ties between equally scored nodes fall to a seeded random node priority, as in the reference
simulator; a randomized policy draws a feasible node uniformly instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import Allocation, BoolArray, Cluster
from .fragmentation import FloatArray
from .model import Shape, TaskRequest
from .policies import Policy
from .predicates import static_mask


@dataclass
class _Scores:
    static: BoolArray
    score: FloatArray
    stamp: np.ndarray


class Placer:
    """Places tasks on a cluster under one policy."""

    def __init__(self, cluster: Cluster, policy: Policy, rng: np.random.Generator) -> None:
        self.cluster = cluster
        self.policy = policy
        self.rng = rng
        self.priority = rng.permutation(len(cluster))
        policy.bind(cluster)
        self._cache: dict[Shape, _Scores] = {}

    def scores(self, task: TaskRequest) -> FloatArray:
        """Current score of every node for the task; -inf where it does not fit."""
        c = self.cluster
        entry = self._cache.get(task.shape)
        if entry is None:
            entry = _Scores(
                static_mask(c, task),
                np.full(len(c), -np.inf),
                np.full(len(c), -1, dtype=np.int64),
            )
            self._cache[task.shape] = entry
        stale = np.flatnonzero(entry.stamp != c.version)
        if stale.size:
            fits = c.fits(task, stale) & entry.static[stale]
            fresh = np.full(stale.size, -np.inf)
            if fits.any():
                fresh[fits] = self.policy.score(c, task, stale[fits])
            entry.score[stale] = fresh
            entry.stamp[stale] = c.version[stale]
        return entry.score

    def choose(self, task: TaskRequest) -> tuple[int, tuple[int, ...]] | None:
        """The node and devices the policy picks, or None when no node fits now."""
        score = self.scores(task)
        if self.policy.randomized:
            candidates = np.flatnonzero(score > -np.inf)
            if not candidates.size:
                return None
            node = int(self.rng.choice(candidates))
        else:
            best = score.max()
            if best == -np.inf:
                return None
            candidates = np.flatnonzero(score == best)
            node = int(candidates[np.argmax(self.priority[candidates])])
        return node, self.policy.devices(self.cluster, node, task, self.rng)

    def place(self, task: TaskRequest) -> Allocation | None:
        choice = self.choose(task)
        if choice is None:
            return None
        return self.cluster.allocate(choice[0], task, choice[1])
