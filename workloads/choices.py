from django.db import models
from django.utils.translation import gettext_lazy as _


class AppKind(models.TextChoices):
    JUPYTER = "jupyter", _("JupyterLab")
    VSCODE = "vscode", _("VS Code")
    PYCHARM = "pycharm-desktop", _("PyCharm (desktop)")
    DESKTOP = "desktop", _("Desktop")
    TENSORBOARD = "tensorboard", _("TensorBoard")
    TERMINAL = "terminal", _("Terminal")
    MODEL_SERVER = "model-server", _("Model server")


class WorkloadKind(models.TextChoices):
    NOTEBOOK = "notebook", _("Environment")
    JOB = "job", _("Training job")
    SERVING = "serving", _("Model serving")


class PayerKind(models.TextChoices):
    """Who pays for the work launched from a grant (``workloads.payer``)."""

    CLASS = "class", _("The class or project of the grant")
    TENANT = "tenant", _("A project or group the teacher manages")
    PERSON = "person", _("The person who launches")


class State(models.TextChoices):
    PENDING = "Pending", _("Pending")
    QUEUED = "Queued", _("Queued")
    STARTING = "Starting", _("Starting")
    RUNNING = "Running", _("Running")
    STOPPING = "Stopping", _("Stopping")
    SUCCEEDED = "Succeeded", _("Succeeded")
    FAILED = "Failed", _("Failed")
    STOPPED = "Stopped", _("Stopped")
    REJECTED = "Rejected", _("Rejected")


# State groups, beside the choices they group.
WAITING = (State.PENDING, State.QUEUED)
HOLDING = (State.STARTING, State.RUNNING, State.STOPPING)  # resources allocated
ACTIVE = WAITING + HOLDING
TERMINAL = (State.SUCCEEDED, State.FAILED, State.STOPPED, State.REJECTED)

# Allowed moves: target -> the states it may come from. A move from anywhere else is refused,
# so a duplicate or late message changes nothing.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    State.QUEUED: (State.PENDING, State.QUEUED),
    # From STARTING and RUNNING: a job restarted after a failure (a new attempt).
    State.STARTING: (State.PENDING, State.QUEUED, State.STARTING, State.RUNNING),
    State.RUNNING: (State.STARTING,),
    State.STOPPING: (State.STARTING, State.RUNNING),
    State.SUCCEEDED: (State.STARTING, State.RUNNING, State.STOPPING),
    State.FAILED: (State.PENDING, State.QUEUED, State.STARTING, State.RUNNING, State.STOPPING),
    State.STOPPED: (State.PENDING, State.QUEUED, State.STARTING, State.RUNNING, State.STOPPING),
    State.REJECTED: (State.PENDING, State.QUEUED),
}

WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class Visibility(models.TextChoices):
    """Who may see and mount a dataset, and see and deploy a model."""

    PRIVATE = "private", _("Only me")
    TENANT = "tenant", _("A class, project or department")
    PUBLIC = "public", _("Everyone on the portal")


class Framework(models.TextChoices):
    """What the model server loads a version's files with (docs/serving.md)."""

    SKLEARN = "sklearn", _("scikit-learn (joblib)")
    CUSTOM = "custom", _("Custom (model.py with a class Model)")
