"""Loading openb CSV files: what loads, and how bad input is refused (file, line, column)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.core.trace import TraceError, load_nodes, load_tasks
from tests.marks import OPENB, requires_openb

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,V100M16\nn1,8000,32768,0,\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "p0,4000,8192,1,500,V100M16|V100M32,LS,Running,10,100,12\n"
    "p1,2000,4096,0,0,,BE,Pending,20,50,\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(call: object) -> TraceError:
    with pytest.raises(TraceError) as info:
        call()  # type: ignore[operator]
    return info.value


def test_node_and_pod_files_load_with_their_fields(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODES))
    tasks = load_tasks(write(tmp_path, "p.csv", PODS), known_models={"V100M16", "V100M32"})
    assert [(n.name, n.gpu_count, n.gpu_model) for n in nodes] == [
        ("n0", 2, "V100M16"),
        ("n1", 0, ""),
    ]
    assert tasks[0].gpu_models == {"V100M16", "V100M32"} and tasks[0].is_sharing
    assert tasks[0].creation_time == 10 and tasks[0].scheduled_time == 12
    assert tasks[1].num_gpu == 0 and tasks[1].scheduled_time is None


def test_the_optional_columns_may_be_absent(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,1000\n")
    (only,) = load_tasks(path)
    assert only.num_gpu == 8 and only.gpu_models == frozenset()


@requires_openb
def test_the_real_openb_files_load() -> None:
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    tasks = load_tasks(OPENB / "openb_pod_list_default.csv", {n.gpu_model for n in nodes})
    assert (len(nodes), sum(n.gpu_count for n in nodes), len(tasks)) == (1213, 6212, 8152)


def test_a_missing_required_column_names_the_file_header_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "name,cpu_milli,num_gpu,gpu_milli\np,1,0,0\n")
    error = refusal(lambda: load_tasks(path))
    assert (error.path, error.line, error.column) == (str(path), 1, "memory_mib")
    assert "p.csv, line 1, column 'memory_mib'" in str(error)


def test_a_negative_value_names_its_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "n.csv", NODES + "n2,-4000,1024,0,\n")
    error = refusal(lambda: load_nodes(path))
    assert (error.line, error.column) == (4, "cpu_milli") and "negative" in error.message


def test_a_non_numeric_value_names_its_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PODS.replace("p1,2000", "p1,lots"))
    error = refusal(lambda: load_tasks(path))
    assert (error.line, error.column) == (3, "cpu_milli") and "not a number" in error.message


def test_an_unknown_gpu_model_in_a_model_set_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PODS)
    error = refusal(lambda: load_tasks(path, known_models={"V100M16"}))
    assert (error.line, error.column) == (2, "gpu_spec") and "V100M32" in error.message


def test_an_empty_file_and_a_header_without_rows_are_refused(tmp_path: Path) -> None:
    assert "empty file" in str(refusal(lambda: load_nodes(write(tmp_path, "a.csv", ""))))
    header_only = write(tmp_path, "b.csv", NODES.splitlines()[0] + "\n")
    assert "no data rows" in str(refusal(lambda: load_nodes(header_only)))


def test_a_gpu_node_without_a_model_is_refused(tmp_path: Path) -> None:
    error = refusal(lambda: load_nodes(write(tmp_path, "n.csv", NODES + "n2,1,1,4,\n")))
    assert (error.line, error.column) == (4, "model")


def test_fractions_of_a_gpu_must_be_between_1_and_1000_milli(tmp_path: Path) -> None:
    bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1500\n"
    error = refusal(lambda: load_tasks(write(tmp_path, "p.csv", bad)))
    assert (error.line, error.column) == (2, "gpu_milli")


def test_time_mode_needs_both_times_on_every_row(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PODS.replace(",20,50,", ",20,,"))
    assert load_tasks(path)[1].deletion_time is None
    error = refusal(lambda: load_tasks(path, require_times=True))
    assert (error.line, error.column) == (3, "deletion_time")
    no_times = write(tmp_path, "q.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,0\n")
    assert refusal(lambda: load_tasks(no_times, require_times=True)).column == "creation_time"
