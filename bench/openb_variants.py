"""Write the openb workload variants (scheduling.core.variants) as pod CSV files.

    .venv/bin/python bench/openb_variants.py                       # all 17, into var/openb
    .venv/bin/python bench/openb_variants.py gpuspec33 --seed 7 --out /tmp/v

Each file is `openb_pod_list_<variant>.csv`, made from the default pod list; the replay
(`manage.py replay --pods ...`) reads it like the published ones.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from scheduling.core.trace import load_nodes, load_tasks  # noqa: E402
from scheduling.core.variants import (  # noqa: E402
    all_variants,
    defining_share,
    make_variant,
    parse,
    write_tasks,
)

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("OPENB_TRACES", str(ROOT.parent / "shared" / "traces" / "openb")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", default=all_variants())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "openb")
    args = parser.parse_args()
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    tasks = load_tasks(TRACES / "openb_pod_list_default.csv")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.variants:
        family, _ = parse(name)
        variant = make_variant(name, tasks, nodes, args.seed)
        path = args.out / f"openb_pod_list_{name}.csv"
        write_tasks(variant, path)
        share = defining_share(family, variant) * 100
        print(f"{path}: {len(variant)} pods, {family} share {share:.2f} %")


if __name__ == "__main__":
    main()
