"""Choosing a node and devices for one task: predicates, policy scores, tie-break.

Scores are cached per task shape and recomputed only for nodes whose version changed since,
so placing thousands of tasks on a thousand nodes costs a few small array operations per task.
When many nodes need scoring at once (a shape's first task, a fresh session on a large
cluster), nodes in the same state (the same capacity, GPU model, free CPU, memory and free
milli-GPU per device) are scored once, through one representative: a policy's score depends
only on the node's own state and the task, so every node of the group gets the same score,
and the same device. Ties between equally scored nodes fall to a seeded random node priority,
as in the reference simulator; a randomized policy draws a feasible node uniformly instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import Allocation, BoolArray, Cluster, IntArray
from .fragmentation import FloatArray
from .model import Shape, TaskRequest
from .policies import Policy
from .predicates import static_mask

# Below this many nodes to score, grouping them by state costs more than it saves.
GROUP_MIN = 48


@dataclass
class _Scores:
    static: BoolArray  # the static predicates and, for a GPU task, its GPU models
    score: FloatArray
    device: IntArray  # the device the policy chose with the score, -1 for none
    tick: int = -1  # the cluster's tick when the scores were brought up to date


class Placer:
    """Places tasks on a cluster under one policy.

    group=False scores every stale node itself (the reference the grouping is tested against).
    """

    def __init__(
        self, cluster: Cluster, policy: Policy, rng: np.random.Generator, group: bool = True
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.rng = rng
        self.group = group
        self.priority = rng.permutation(len(cluster))
        policy.bind(cluster)
        self._cache: dict[Shape, _Scores] = {}
        # What never changes about a node and any score may read: capacity and GPU model.
        fixed = np.column_stack(
            [cluster.model_id, cluster.cpu_cap, cluster.mem_cap, cluster.dev_cap]
        )
        _, kind = np.unique(fixed, axis=0, return_inverse=True)
        self._kind: IntArray = kind.reshape(-1).astype(np.int64)
        # Random odd multipliers: a node state's hash is its columns' dot product with them
        # (wrapping int64); equal hashes are confirmed column by column before sharing a score.
        mixer = np.random.default_rng(0x5EED).integers(1, 2**62, size=3 + cluster.max_devices)
        self._mixer: IntArray = (mixer | 1).astype(np.int64)

    def scores(self, task: TaskRequest) -> FloatArray:
        """Current score of every node for the task; -inf where it does not fit."""
        return self._scores(task).score

    def _scores(self, task: TaskRequest) -> _Scores:
        c = self.cluster
        shape = task.shape
        entry = self._cache.get(shape)
        if entry is None:
            n = len(c)
            static = static_mask(c, task)
            if task.num_gpu:
                static &= c.model_mask(task.gpu_models)[c.model_id]
            entry = _Scores(static, np.full(n, -np.inf), np.full(n, -1, dtype=np.int64))
            self._cache[shape] = entry
        if entry.tick != c.tick:
            # Versions only grow, so the nodes changed since the entry's tick are the stale ones.
            stale = np.flatnonzero(c.version > entry.tick)
            fits = c.fits_resources(task, stale) & entry.static[stale]
            entry.score[stale] = -np.inf
            entry.device[stale] = -1
            todo = stale[fits]
            if todo.size:
                self._score(task, todo, entry)
            entry.tick = c.tick
        return entry

    def _score(self, task: TaskRequest, nodes: IntArray, entry: _Scores) -> None:
        """Fill in scores (and devices) of the given fitting nodes."""
        if self.group and nodes.size >= GROUP_MIN:
            reps, members = self._representatives(nodes)
            if reps.size < nodes.size:
                score, device = self.policy.score_devices(self.cluster, task, nodes[reps])
                entry.score[nodes] = score[members]
                if device is not None:
                    entry.device[nodes] = device[members]
                return
        score, device = self.policy.score_devices(self.cluster, task, nodes)
        entry.score[nodes] = score
        if device is not None:
            entry.device[nodes] = device

    def _representatives(self, nodes: IntArray) -> tuple[IntArray, IntArray]:
        """Positions (into nodes) of one node per distinct state, and each node's group.

        Nodes whose hashes collide without equal states get a group of their own."""
        c = self.cluster
        state = np.column_stack(
            [self._kind[nodes], c.cpu_free[nodes], c.mem_free[nodes], c.dev_free[nodes]]
        )
        hashed = state @ self._mixer
        _, first, members = np.unique(hashed, return_index=True, return_inverse=True)
        members = members.reshape(-1)
        if not (state == state[first[members]]).all():
            everyone = np.arange(nodes.size)
            return everyone, everyone
        return first, members

    def choose(self, task: TaskRequest) -> tuple[int, tuple[int, ...]] | None:
        """The node and devices the policy picks, or None when no node fits now."""
        entry = self._scores(task)
        score = entry.score
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
        device = int(entry.device[node])
        if device >= 0:
            return node, (device,)
        return node, self.policy.devices(self.cluster, node, task, self.rng)

    def place(self, task: TaskRequest) -> Allocation | None:
        choice = self.choose(task)
        if choice is None:
            return None
        return self.cluster.allocate(choice[0], task, choice[1])
