"""The reasons the scheduling layer gives: placement, the scheduler core, and what the cluster
backends observe (Kubernetes status, the local and simulated backends).

Pure: only ``core.reasons`` is imported (the scheduler core and the backends are Django-free).
Templates are today's English wording, so the text, the API and the translations stay as they
were.
"""

from __future__ import annotations

from core.reasons import define, gettext_noop, ngettext_noop

# --- general -------------------------------------------------------------------------------------

RUNNING = define("running", gettext_noop("running"))
FINISHED = define("finished", gettext_noop("finished"))
FAILED = define("failed", gettext_noop("failed"))
# Words from outside after a reason of ours: a program's last log line, a container's message.
WITH_DETAIL = define("with_detail", gettext_noop("%(reason)s: %(detail)s"))

# --- placement (scheduling.placement) ----------------------------------------------------------

NO_NODES = define("no_nodes", gettext_noop("this cluster has no nodes"))
TOO_BIG_CPU = define(
    "too_big_cpu",
    gettext_noop("bigger than any node: asks %(n)s CPU cores, the largest node has %(m)s"),
)
TOO_BIG_MEMORY = define(
    "too_big_memory",
    gettext_noop("bigger than any node: asks %(n)s MiB of memory, the largest node has %(m)s"),
)
TOO_BIG_GPUS = define(
    "too_big_gpus",
    gettext_noop("bigger than any node: asks %(n)s GPUs on one node, the most is %(m)s"),
)
TOO_BIG_GPU_MEMORY = define(
    "too_big_gpu_memory",
    gettext_noop("bigger than any GPU: asks %(n)s MiB of GPU memory, the largest GPU has %(m)s"),
)
GANG_WAITING = define(
    "gang_waiting",
    gettext_noop("waiting for all %(n)s workers of the gang to fit (%(m)s fit now)"),
)
# ``what``: the GPU models followed by a space ("A100 or V100 "), or "".
NO_SUCH_GPU = define(
    "no_such_gpu",
    gettext_noop("waiting for capacity: this cluster has no %(what)sGPU right now"),
)
# ``what``: one of the FREE_* reasons below.
NO_CAPACITY = define("no_capacity", gettext_noop("waiting for capacity: no node has %(what)s now"))
FREE_GPUS = define(
    "free_gpus",
    ngettext_noop("%(n)s free %(models)sGPU", "%(n)s free %(models)sGPUs"),
    count="n",
)
FREE_GPU_SHARE = define(
    "free_gpu_share",
    gettext_noop("a %(models)sGPU with %(pct)s%% compute and %(mib)s MiB free"),
)
FREE_CPU_MEMORY = define(
    "free_cpu_memory", gettext_noop("%(cores)s CPU cores and %(mib)s MiB of memory free")
)

# --- the scheduler core (scheduling.core) ------------------------------------------------------

NO_QUEUE_NAMED = define("no_queue_named", gettext_noop("no queue named %(queue)s"))
TASK_TOO_BIG = define("task_too_big", gettext_noop("task %(task)s: %(why)s"))
TOO_BIG_NEEDS = define(
    "too_big_needs", gettext_noop("bigger than any node: needs %(parts)s"), separator="; "
)
NEEDS_CPU = define("needs_cpu", gettext_noop("%(milli)s milli-CPU (largest node %(largest)s)"))
NEEDS_MEMORY = define("needs_memory", gettext_noop("%(mib)s MiB (largest node %(largest)s)"))
NEEDS_GPUS = define(
    "needs_gpus", gettext_noop("%(n)s GPUs of %(models)s (largest such node has %(most)s)")
)
ANY_MODEL = define("any_model", gettext_noop("any model"))
NEEDS_ONE_NODE = define(
    "needs_one_node", gettext_noop("no single node has all of its CPU, memory and GPUs")
)
QUEUE_CAPABILITY = define("queue_capability", gettext_noop("queue %(queue)s: capability reached"))
QUEUE_DESERVED = define("queue_deserved", gettext_noop("queue %(queue)s: at its deserved share"))
CLUSTER_FULL = define(
    "cluster_full", gettext_noop("cluster full: not enough idle resources to admit")
)
NOT_ADMITTED = define("not_admitted", gettext_noop("not admitted yet"))
PREEMPTED_FOR = define("preempted_for", gettext_noop("preempted for job %(job)s"))
RECLAIMED_FOR = define("reclaimed_for", gettext_noop("reclaimed for job %(job)s"))
GANG_BROKEN = define(
    "gang_broken", gettext_noop("gang of %(job)s broken by eviction for %(preemptor)s")
)
LOST_PLACEMENT = define("lost_placement", gettext_noop("lost its placement: %(why)s"))
GANG_NOT_ALL_FIT = define(
    "gang_not_all_fit", gettext_noop("gang: not all %(n)s tasks needed to start fit at once")
)
FRAGMENTATION = define(
    "fragmentation",
    gettext_noop(
        "fragmentation: %(free)s GPUs free in total but no node has %(gpus)s x %(milli)s "
        "milli-GPU with the CPU and memory for %(task)s"
    ),
)
NO_NODE_FITS_TASK = define(
    "no_node_fits_task", gettext_noop("waiting for capacity: no node fits task %(task)s now")
)

# --- the local backend (scheduling.backends.local) ---------------------------------------------

TASKS_NOT_STARTED = define(
    "tasks_not_started", gettext_noop("only %(n)s of %(m)s tasks were started")
)
STOPPING_PROCESSES = define(
    "stopping_processes", gettext_noop("stopping: waiting for the processes to exit")
)
STOPPED_ON_REQUEST = define("stopped_on_request", gettext_noop("stopped on request"))
WORKER_EXITED = define("worker_exited", gettext_noop("worker %(n)s exited with code %(code)s"))
WORKER_KILLED = define(
    "worker_killed", gettext_noop("worker %(n)s was killed by %(signal)s (exit code %(code)s)")
)
WORKER_OUT_OF_MEMORY = define(
    "worker_out_of_memory",
    gettext_noop(
        "worker %(n)s was killed for using more than its %(mib)s MiB of memory (exit code %(code)s)"
    ),
)
WORKER_DISAPPEARED = define(
    "worker_disappeared", gettext_noop("worker %(n)s disappeared without an exit code")
)
EXITED_0 = define("exited_0", gettext_noop("exited with code 0"))
ALL_EXITED_0 = define("all_exited_0", gettext_noop("all %(n)s workers exited with code 0"))
APP_SHUT_DOWN = define("app_shut_down", gettext_noop("%(app)s shut itself down (exit code 0)"))
APP_EXITED = define("app_exited", gettext_noop("%(app)s exited with code %(code)s"))
APP_KILLED = define(
    "app_killed", gettext_noop("%(app)s was killed by %(signal)s (exit code %(code)s)")
)
APP_OUT_OF_MEMORY = define(
    "app_out_of_memory",
    gettext_noop(
        "%(app)s was killed for using more than its %(mib)s MiB of memory (exit code %(code)s)"
    ),
)
APP_DISAPPEARED = define(
    "app_disappeared", gettext_noop("%(app)s disappeared without an exit code")
)
# Apps this host cannot run (the local backend's ``unavailable``, the admin catalog, submit).
APP_NOT_INSTALLED = define("app_not_installed", gettext_noop("%(program)s: not found on this host"))
VSCODE_NOT_INSTALLED = define(
    "vscode_not_installed",
    gettext_noop(
        "VS Code (code-server) is not installed on this host: run make apps, or set CODE_SERVER_BIN"
    ),
)
DESKTOP_NOT_INSTALLED = define(
    "desktop_not_installed",
    gettext_noop(
        "the desktop needs %(missing)s on this host: run make apps (Debian packages "
        "tigervnc-standalone-server, tigervnc-tools, xauth, openbox, novnc)"
    ),
)
PYCHARM_NOT_CONFIGURED = define(
    "pycharm_not_configured",
    gettext_noop("PyCharm is not installed on this host: set PYCHARM_HOME"),
)
PYCHARM_NOT_FOUND = define(
    "pycharm_not_found",
    gettext_noop("PyCharm is not installed on this host: %(path)s has no bin/pycharm.sh"),
)
PYCHARM_NOT_IN_IMAGE = define(
    "pycharm_not_in_image",
    gettext_noop(
        "PyCharm is not in this cluster's desktop image: set pycharm_in_image in the "
        "cluster's settings once it is"
    ),
)
DESKTOP_NEEDS_PROGRAM = define(
    "desktop_needs_program", gettext_noop("the desktop template names no program to start")
)
SOCKET_PATH_TOO_LONG = define(
    "socket_path_too_long",
    gettext_noop("the path %(path)s is too long for a UNIX socket: use a shorter DATA_DIR"),
)
MODEL_SERVER_NOT_INSTALLED = define(
    "model_server_not_installed",
    gettext_noop(
        "the model server's Python (with scikit-learn) is not installed on this host: "
        "run make apps, or set SERVING_PYTHON"
    ),
)
MODEL_NOT_LOADED = define(
    "model_not_loaded", gettext_noop("replica %(n)s of the model server exited with code %(code)s")
)
WAITING_FOR_SERVER_ANSWER = define(
    "waiting_for_server_answer", gettext_noop("waiting for the server to answer")
)
NO_SUCH_WORKLOAD = define("no_such_workload", gettext_noop("no such workload on this host"))

# --- the simulated backend ---------------------------------------------------------------------

STOPPED_SIMULATED = define("stopped_simulated", gettext_noop("stopped (simulated)"))
FINISHED_SIMULATED = define(
    "finished_simulated", gettext_noop("finished after %(n)s simulated minutes")
)
RUNNING_SIMULATED = define("running_simulated", gettext_noop("running on %(where)s (simulated)"))
THE_SIMULATED_CLUSTER = define("the_simulated_cluster", gettext_noop("the simulated cluster"))

# --- Kubernetes (scheduling.backends.kubernetes.status) ----------------------------------------

DELETED_ON_CLUSTER = define("deleted_on_cluster", gettext_noop("deleted on the cluster"))
FAILED_AFTER_RESTARTS = define(
    "failed_after_restarts",
    ngettext_noop("failed after %(n)s restart: %(why)s", "failed after %(n)s restarts: %(why)s"),
    count="n",
)
STOPPED = define("stopped", gettext_noop("stopped"))
TERMINATED_ON_CLUSTER = define("terminated_on_cluster", gettext_noop("terminated on the cluster"))
ABORTED_ON_CLUSTER = define("aborted_on_cluster", gettext_noop("aborted on the cluster"))
# Codes of an in-place restart start with "restarting" (scheduling.tasks records them).
RESTARTING_AFTER = define(
    "restarting_after", gettext_noop("restarting after %(why)s (restart %(n)s of %(most)s)")
)
RESTARTING_AFTER_SOMETHING = define(
    "restarting_after_something",
    gettext_noop("restarting after an eviction or a failure (restart %(n)s of %(most)s)"),
)
COMPLETING = define("completing", gettext_noop("completing"))
WAITING_FOR_SERVER = define("waiting_for_server", gettext_noop("waiting for the server"))
RUNNING_ON = define("running_on", gettext_noop("running on %(where)s"))
THE_CLUSTER = define("the_cluster", gettext_noop("the cluster"))
SOME_NODES = define("some_nodes", gettext_noop("%(n)s nodes (%(first)s, …)"))
NAMESPACE_QUOTA = define(
    "namespace_quota", gettext_noop("waiting: the namespace quota is exceeded: %(detail)s")
)
WAITING_FOR_RESOURCES = define(
    "waiting_for_resources", gettext_noop("waiting for resources: %(why)s")
)
UNSCHEDULABLE = define("unschedulable", gettext_noop("unschedulable"))
NO_NODE_FITS = define("no_node_fits", gettext_noop("no node fits"))
ADMITTED_BY_QUEUE = define(
    "admitted_by_queue",
    gettext_noop("admitted by queue %(queue)s: %(started)s of %(wanted)s pods started"),
)
CANNOT_CREATE_PODS = define(
    "cannot_create_pods", gettext_noop("the cluster cannot create its pods: %(why)s")
)
WAITING_IN_QUEUE = define("waiting_in_queue", gettext_noop("waiting in queue %(queue)s"))
SERVING_WITH = define(
    "serving_with", gettext_noop("serving with %(available)s of %(wanted)s replicas ready")
)
SCALED_TO_ZERO = define("scaled_to_zero", gettext_noop("scaled to zero"))
MODEL_FAILED = define("model_failed", gettext_noop("the model server failed: %(why)s"))
NOT_READY_IN_TIME = define(
    "not_ready_in_time", gettext_noop("did not become ready in time: %(why)s")
)
STARTING_REPLICAS = define(
    "starting_replicas",
    ngettext_noop("starting %(n)s replica", "starting %(n)s replicas"),
    count="n",
)
COMPLETED = define("completed", gettext_noop("completed"))
COMPLETED_TASKS = define(
    "completed_tasks",
    ngettext_noop("completed (%(n)s task succeeded)", "completed (%(n)s tasks succeeded)"),
    count="n",
)
POD_EVICTED = define("pod_evicted", gettext_noop("%(task)s was evicted"))
POD_OOM = define(
    "pod_oom", gettext_noop("%(task)s ran out of memory (OOMKilled, exit code %(code)s)")
)
POD_KILLED = define(
    "pod_killed", gettext_noop("%(task)s was killed by signal %(signal)s (exit code %(code)s)")
)
POD_EXITED = define("pod_exited", gettext_noop("%(task)s exited with code %(code)s"))
POD_FAILED = define("pod_failed", gettext_noop("%(task)s failed"))
BAD_IMAGE = define(
    "bad_image", gettext_noop("the image %(image)s cannot be used (%(why)s): %(message)s")
)
CANNOT_PULL = define("cannot_pull", gettext_noop("cannot pull the image %(image)s (%(why)s)"))
GAVE_UP_AFTER = define("gave_up_after", gettext_noop("%(reason)s; gave up after %(n)s s"))
CANNOT_START = define("cannot_start", gettext_noop("%(task)s cannot start (%(why)s): %(message)s"))
KEEPS_CRASHING = define("keeps_crashing", gettext_noop("%(task)s keeps crashing"))
DELETED_FROM_CLUSTER = define("deleted_from_cluster", gettext_noop("deleted from the cluster"))
NOT_ON_CLUSTER = define("not_on_cluster", gettext_noop("no such workload on the cluster"))
