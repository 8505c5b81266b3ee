"""The Kubernetes + Volcano backend (see docs/kubernetes.md).

``manifests`` and ``schedulerconf`` build objects as plain dicts, ``status`` and ``nodes`` read
them back, ``client`` talks to the API server through the official client, ``watcher`` follows
it live and ``backend`` puts these together behind the backend contract. No Django here.
"""

from scheduling.backends.kubernetes.backend import KubernetesBackend
from scheduling.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesBackend", "KubernetesConfig"]
