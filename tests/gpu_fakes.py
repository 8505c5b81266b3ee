"""Fake GPU utilisation sources: an NVML module (``pynvml``'s calls the portal makes, on
devices whose readings a test sets) and a Prometheus server (its HTTP API's instant queries,
over real HTTP on a free port) answering DCGM exporter series a test sets."""

from __future__ import annotations

import json
import threading
import types
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

MIB = 1024 * 1024


class NVMLError(Exception):
    pass


@dataclass
class FakeDevice:
    utilisation: int = 0
    memory_used_mib: int = 0
    memory_total_mib: int = 40960
    name: str = "NVIDIA A100-SXM4-40GB"


@dataclass
class FakeNvml:
    """What NVML would report: ``devices`` by index; ``no_driver`` makes ``nvmlInit`` fail as
    it does on a host without the NVIDIA driver."""

    devices: list[FakeDevice] = field(default_factory=list)
    no_driver: bool = False
    inits: int = 0

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("pynvml")
        fake.NVMLError = NVMLError  # type: ignore[attr-defined]

        def init() -> None:
            if self.no_driver:
                raise NVMLError("NVML Shared Library Not Found")
            self.inits += 1

        def handle(index: int) -> FakeDevice:
            return self.devices[index]

        fake.nvmlInit = init  # type: ignore[attr-defined]
        fake.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
        fake.nvmlDeviceGetCount = lambda: len(self.devices)  # type: ignore[attr-defined]
        fake.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
        fake.nvmlDeviceGetName = lambda h: h.name  # type: ignore[attr-defined]
        fake.nvmlDeviceGetUUID = lambda h: f"GPU-{id(h):x}"  # type: ignore[attr-defined]
        fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
            gpu=h.utilisation, memory=0
        )
        fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
            total=h.memory_total_mib * MIB,
            used=h.memory_used_mib * MIB,
            free=(h.memory_total_mib - h.memory_used_mib) * MIB,
        )
        return fake


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fake ``pynvml`` in place of the real one, with two idle A100s."""
    fake = FakeNvml([FakeDevice(), FakeDevice()])
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake.module())
    return fake


class FakePrometheus:
    """``/api/v1/query?query=<metric>`` answers the series set in ``series[metric]`` (each
    a label mapping and a value), as Prometheus's HTTP API does; ``down`` answers 503."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[Mapping[str, str], float]]] = {}
        self.queries: list[str] = []
        self.down = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parts.query).get("query", [""])[0]
                fake.queries.append(query)
                if fake.down or parts.path != "/api/v1/query":
                    self.send_response(503 if fake.down else 404)
                    self.end_headers()
                    return
                result = [
                    {"metric": {"__name__": query, **labels}, "value": [1.0, str(value)]}
                    for labels, value in fake.series.get(query, [])
                ]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def set_device(
        self,
        node: str,
        gpu: int,
        utilisation: float,
        memory_used_mib: float = 0,
        *,
        pod: str = "",
        namespace: str = "",
    ) -> None:
        """One device's DCGM series, labelled as the exporter does (Hostname, gpu, pod)."""
        labels = {"Hostname": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}"}
        if pod:
            labels.update(pod=pod, namespace=namespace, container="main")
        for metric, value in (
            ("DCGM_FI_DEV_GPU_UTIL", utilisation),
            ("DCGM_FI_DEV_FB_USED", memory_used_mib),
        ):
            rows = [
                r
                for r in self.series.get(metric, [])
                if r[0]["Hostname"] != node or r[0]["gpu"] != str(gpu)
            ]
            rows.append((labels, value))
            self.series[metric] = rows


@contextmanager
def prometheus_server() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    with prometheus_server() as server:
        yield server
