"""One arrival-mode replay of openb default, for counting its instructions with callgrind.

Counts are repeatable on a loaded machine, unlike seconds. Subtract a run with --runs 0 (the
imports and the trace loading) from a run with --runs 1 to get the replay's own count:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/replay_once.py --runs 1 --policy fgd-mix
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from scheduling.core.policies import RECOMMENDED  # noqa: E402
from scheduling.core.replay import run_arrival  # noqa: E402
from scheduling.core.trace import load_nodes, load_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("OPENB_TRACES", str(ROOT.parent / "shared" / "traces" / "openb")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--policy", default=RECOMMENDED)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    models = {n.gpu_model for n in nodes if n.gpu_count}
    tasks = load_tasks(TRACES / "openb_pod_list_default.csv", known_models=models)
    for i in range(args.runs):
        run = run_arrival(nodes, tasks, args.policy, args.seed + i, curves=False)
        print(f"{args.policy} seed {args.seed + i}: {run.seconds:.3f} s")


if __name__ == "__main__":
    main()
