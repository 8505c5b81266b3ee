"""The GPUs of this host, as NVML reports them.

The local backend pins work to devices by NVML index (``CUDA_VISIBLE_DEVICES`` together with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers devices the way NVML does). Discovery never
raises: a host without a driver, without the library or with a broken NVML simply has no
GPUs, and the portal falls back to a configured inventory.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from scheduling.backends.base import GpuInfo

log = logging.getLogger(__name__)


def discover_gpus() -> tuple[GpuInfo, ...]:
    """Every device NVML sees, by index; ``()`` when there is no usable NVML."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception as error:  # NVMLError, or OSError from a half-installed driver
        log.info("no NVML on this host (%s): no GPUs discovered", error)
        return ()
    try:
        gpus = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    model=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(memory.total) // (1024 * 1024),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                )
            )
        return tuple(gpus)
    except Exception as error:  # a device that fails mid-query: report none rather than half
        log.warning("NVML failed while listing GPUs (%s): no GPUs discovered", error)
        return ()
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def utilisation(indices: Sequence[int]) -> int | None:
    """The mean compute utilisation (percent, NVML's last sample period) of the devices
    ``indices``; None without them or without a usable NVML."""
    if not indices:
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        rates = [
            int(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i)).gpu)
            for i in indices
        ]
        return round(sum(rates) / len(rates))
    except Exception:  # a device that fails mid-query: not known, rather than wrong
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def device_usage() -> tuple[tuple[int, int, int], ...]:
    """(index, compute utilisation %, memory used MiB) of every device NVML sees; ``()``
    without a usable NVML, or when a device fails mid-query (no reading rather than half)."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception:
        return ()
    try:
        readings = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append((index, int(rates.gpu), int(memory.used) // (1024 * 1024)))
        return tuple(readings)
    except Exception as error:
        log.info("NVML failed while reading utilisation (%s): no reading", error)
        return ()
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: object) -> str:
    """Older pynvml releases return bytes, newer ones str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
