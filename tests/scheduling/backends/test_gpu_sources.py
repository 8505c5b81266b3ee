"""The utilisation source of each backend: NVML on the local backend (a fake module here),
DCGM exporter series through Prometheus's HTTP API on Kubernetes (a fake Prometheus over
real HTTP), made-up values on the simulated one. A missing source is "no reading", never an
error."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduling.backends.base import (
    GpuReading,
    Resources,
    TaskPlacement,
    UtilisationBackend,
    WorkloadSpec,
)
from scheduling.backends.kubernetes import KubernetesBackend, dcgm, manifests
from scheduling.backends.local import LocalBackend
from scheduling.backends.simulated import SimulatedBackend
from tests.gpu_fakes import (  # noqa: F401 (fixtures)
    FakeNvml,
    FakePrometheus,
    nvml,
    prometheus,
)
from tests.scheduling.kubernetes.conftest import (  # noqa: F401 (fixtures)
    NAMESPACE,
    api,
    make_backend,
    settings_for,
    sleeps,
    spec,
)
from tests.scheduling.kubernetes.emulator import ApiServer

# --- local: NVML ---------------------------------------------------------------------------------


def test_the_local_backend_reads_each_device_from_nvml(nvml: FakeNvml, tmp_path: Path) -> None:  # noqa: F811
    nvml.devices[0].utilisation, nvml.devices[0].memory_used_mib = 93, 30000
    nvml.devices[1].utilisation = 0
    backend = LocalBackend(tmp_path, node_name="gpu-host")
    assert isinstance(backend, UtilisationBackend)
    assert backend.gpu_readings() == (
        GpuReading("gpu-host", 0, 93, 30000),
        GpuReading("gpu-host", 1, 0, 0),
    )


def test_no_driver_or_no_library_is_no_reading(
    nvml: FakeNvml,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = LocalBackend(tmp_path, node_name="gpu-host")
    nvml.no_driver = True
    assert backend.gpu_readings() == ()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import itself fails
    assert backend.gpu_readings() == ()


def test_a_device_failing_mid_query_gives_no_half_reading(
    nvml: FakeNvml,  # noqa: F811
    tmp_path: Path,
) -> None:
    nvml.devices.append(None)  # type: ignore[arg-type]  # the third device's queries raise
    assert LocalBackend(tmp_path, node_name="gpu-host").gpu_readings() == ()


# --- simulated -----------------------------------------------------------------------------------


def _sim_spec(workload_id: str, kind: str, gpus: tuple[int, ...]) -> WorkloadSpec:
    return WorkloadSpec(
        workload_id=workload_id,
        kind=kind,
        app="jupyter" if kind == "notebook" else "command",
        owner="bob",
        resources=Resources(gpus=len(gpus)),
        placement=(TaskPlacement("sim-a100-00", gpus),),
    )


def test_the_simulation_reads_plausible_values_on_the_devices_its_work_holds(
    tmp_path: Path,
) -> None:
    clock = [1000.0]
    backend = SimulatedBackend(tmp_path, clock=lambda: clock[0])
    ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(12)]
    for i, workload_id in enumerate(ids):
        backend.submit(_sim_spec(workload_id, "notebook" if i % 2 else "job", (i % 8,)))
    readings = backend.gpu_readings()
    assert {r.node for r in readings} == {"sim-a100-00"}
    assert {r.index for r in readings} == set(range(8))  # only devices with work
    assert all(0 <= r.utilisation <= 100 for r in readings)
    assert all(0 <= r.memory_used_mib <= 40960 for r in readings)
    assert len({r.utilisation for r in readings}) > 1  # not one made-up number for all
    assert backend.gpu_readings() == readings  # the same minute reads the same
    backend.stop(backend.submit(_sim_spec(ids[0], "job", (0,))))
    backend.stop(backend.submit(_sim_spec(ids[8], "job", (0,))))
    assert 0 not in {r.index for r in backend.gpu_readings()}


# --- Kubernetes: DCGM through Prometheus --------------------------------------------------------


def test_dcgm_series_become_one_reading_per_device(prometheus: FakePrometheus) -> None:  # noqa: F811
    prometheus.set_device("gpu-01", 0, 97.0, 30000, pod="train-x-master-0", namespace="ns")
    prometheus.set_device("gpu-01", 1, 0.0, 0)
    prometheus.set_device("gpu-02", 3, 12.6, 512)
    series = dcgm.read(prometheus.url, node_labels=("node", "Hostname"), timeout=2)
    assert sorted(series, key=lambda s: (s.node, s.index)) == [
        dcgm.DeviceSeries("gpu-01", 0, 97, 30000, pod="train-x-master-0", namespace="ns"),
        dcgm.DeviceSeries("gpu-01", 1, 0, 0),
        dcgm.DeviceSeries("gpu-02", 3, 13, 512),
    ]
    assert set(prometheus.queries) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}


def test_relabelled_and_broken_series(prometheus: FakePrometheus) -> None:  # noqa: F811
    prometheus.series["DCGM_FI_DEV_GPU_UTIL"] = [
        ({"node": "gpu-07", "Hostname": "dcgm-exporter-abc", "gpu": "2",
          "exported_pod": "nb-1", "exported_namespace": "quanta-x"}, 40.0),
        ({"Hostname": "gpu-08", "gpu": "not-a-number"}, 50.0),  # no index: skipped
        ({"gpu": "1"}, 50.0),  # no node: skipped
        ({"Hostname": "gpu-09", "gpu": "0"}, float("nan")),  # no value: skipped
    ]  # fmt: skip
    (only,) = dcgm.read(prometheus.url, node_labels=("node", "Hostname"), timeout=2)
    assert (only.node, only.index, only.utilisation) == ("gpu-07", 2, 40)
    assert (only.pod, only.namespace) == ("nb-1", "quanta-x")


def test_no_prometheus_is_no_reading(prometheus: FakePrometheus) -> None:  # noqa: F811
    assert dcgm.read("", node_labels=("Hostname",)) == ()
    prometheus.down = True
    prometheus.set_device("gpu-01", 0, 50.0)
    assert dcgm.read(prometheus.url, node_labels=("Hostname",), timeout=2) == ()
    assert dcgm.read("http://127.0.0.1:9", node_labels=("Hostname",), timeout=0.5) == ()


def test_the_kubernetes_backend_names_the_workload_of_each_device(
    api: ApiServer,  # noqa: F811
    make_backend: Callable[..., KubernetesBackend],  # noqa: F811
    prometheus: FakePrometheus,  # noqa: F811
) -> None:
    backend = make_backend(prometheus_url=prometheus.url)
    assert isinstance(backend, UtilisationBackend)
    workload = spec("job")
    handle = backend.submit(workload)
    pod = f"{handle.state['name']}-master-0"
    api.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": NAMESPACE,
                "labels": manifests.workload_labels(workload, "job"),
            },
            "spec": {"nodeName": "gpu-01", "containers": [{"name": "main", "image": "x"}]},
        }
    )
    prometheus.set_device("gpu-01", 0, 88.0, 20000, pod=pod, namespace=NAMESPACE)
    prometheus.set_device("gpu-01", 1, 0.0, 0, pod="someone-elses", namespace="other")
    readings = sorted(backend.gpu_readings(), key=lambda r: r.index)
    assert readings == [
        GpuReading("gpu-01", 0, 88, 20000, (workload.workload_id,)),
        GpuReading("gpu-01", 1, 0, 0, ()),
    ]


def test_the_kubernetes_backend_without_prometheus_reads_nothing(
    make_backend: Callable[..., KubernetesBackend],  # noqa: F811
) -> None:
    assert make_backend().gpu_readings() == ()
