"""The reasons billing gives: budget refusals (admission, launches, stops) and its notices."""

from __future__ import annotations

from core.reasons import define, gettext_noop

# billing.choices.BudgetPeriod values, as the messages name the current period.
PERIOD_WORDS = {"month": gettext_noop("this month"), "term": gettext_noop("this term")}
_WORDS = {"period": PERIOD_WORDS}

BUDGET_USED_UP = define(
    "budget_used_up",
    gettext_noop("%(tenant)s's budget for %(period)s is used up (until %(date)s)"),
    words=_WORDS,
)
GPU_BUDGET_USED_UP = define(
    "gpu_budget_used_up",
    gettext_noop(
        "%(tenant)s's GPU budget for %(period)s is used up: only CPU-only sizes until %(date)s"
    ),
    words=_WORDS,
)
STOPPED_BUDGET_USED_UP = define(
    "stopped_budget_used_up",
    gettext_noop("stopped: %(tenant)s's budget for %(period)s is used up"),
    words=_WORDS,
)
# Notices (core.notices) to the payer's teachers and admins and its students.
BUDGET_THRESHOLD = define(
    "budget_threshold",
    gettext_noop(
        "%(tenant)s has used %(percent)s%% of its budget for %(period)s (%(spent)s of %(total)s)"
    ),
    words=_WORDS,
)
BUDGET_EXHAUSTED_BLOCK = define(
    "budget_exhausted_block",
    gettext_noop(
        "%(tenant)s's budget for %(period)s is used up: new launches are refused until %(date)s"
    ),
    words=_WORDS,
)
BUDGET_EXHAUSTED_DOWNGRADE = define(
    "budget_exhausted_downgrade",
    gettext_noop(
        "%(tenant)s's budget for %(period)s is used up: only CPU-only sizes can be launched "
        "until %(date)s"
    ),
    words=_WORDS,
)
BUDGET_EXHAUSTED_STOP = define(
    "budget_exhausted_stop",
    gettext_noop(
        "%(tenant)s's budget for %(period)s is used up: running work is stopped in %(n)s "
        "minutes unless credit is granted"
    ),
    words=_WORDS,
)
