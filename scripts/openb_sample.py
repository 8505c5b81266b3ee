"""Make the what-if page's sample trace (scheduling/data/openb_sample_*.csv) from the openb
trace: 60 GPU nodes drawn at random, and 800 pods of the default pod list that those nodes can
run (no gpu_spec, or only models among them). Small enough to replay in about a second per
policy and seed, large enough that the policies differ.

    python scripts/openb_sample.py ../shared/traces/openb scheduling/data
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

NODES, PODS, SEED = 60, 800, 7


def main(source: Path, target: Path) -> None:
    rng = random.Random(SEED)
    with (source / "openb_node_list_gpu_node.csv").open() as f:
        nodes = list(csv.DictReader(f))
    picked_nodes = sorted(rng.sample(nodes, NODES), key=lambda r: r["sn"])
    models = {r["model"] for r in picked_nodes}
    with (source / "openb_pod_list_default.csv").open() as f:
        pods = list(csv.DictReader(f))
    runnable = [p for p in pods if not p["gpu_spec"] or set(p["gpu_spec"].split("|")) <= models]
    picked_pods = sorted(rng.sample(runnable, PODS), key=lambda r: r["name"])
    for name, rows in (("nodes", picked_nodes), ("pods", picked_pods)):
        with (target / f"openb_sample_{name}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
