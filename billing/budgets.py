"""Budgets, allowances and credits: what a tenant may spend, what is left, and what happens
when it is used up (docs/billing.md, "Budgets, allowances and credits").

- A **budget** (``Budget``) belongs to a class, department or project: an allowance per month
  or term, warning thresholds in per cent, and a policy when it is used up (block new launches,
  only CPU-only sizes, stop running work after a warning and a grace period). A department's
  budget covers the spend of its whole subtree (the accounts of the tenants under its path).
- **Credit** comes in lots (``CreditLot``): the allowance of each period (valid for that period)
  and credit an admin grants (valid from its grant until its expiry, or without end). What
  remains of a lot is *derived* from the ledger, never stored: spend consumes the lots valid
  when it was made, credit granted by hand first, then the lot that expires first. So it can
  never drift from what was charged.
- **Spend** is the sum of the ledger entries of the covered accounts: a charge counts at its
  ``period_start`` (charges never straddle a calendar month), anything else (a correction) at
  its ``created_at``.

Every write here is a service: one transaction, the actor passed in, admins of the tenant (or
superusers) only, audited (``budget.create``, ``budget.update``, ``budget.deactivate``,
``credit.grant``). ``evaluate`` runs after each settlement tick: it notifies at thresholds once
per threshold and period, and carries out a stop policy after its grace.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import DecimalField, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from billing import reasons as BR
from billing.choices import BudgetPeriod, BudgetPolicy, CreditSource
from billing.models import Account, Budget, BudgetAlert, CreditLot, LedgerEntry
from billing.services import account_for_tenant
from core import notices
from core.audit import record
from core.models import Notice
from core.reasons import Reason
from tenants.choices import ADMIN_ROLES, MANAGING_ROLES, TenantKind
from tenants.models import Membership, Tenant
from tenants.permissions import Access
from workloads import services as workload_services
from workloads.admission_checks import Ask
from workloads.choices import ACTIVE, State
from workloads.models import Workload

MAX_AMOUNT = Decimal("999999999999.999999")
MICRO = Decimal("0.000001")
MAX_GRACE_MINUTES = 7 * 24 * 60
ZERO = Decimal(0)
OK, WARNED, EXHAUSTED = "ok", "warned", "exhausted"


# --- Periods ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """The budget's current period, [start, end) in the portal's time zone."""

    kind: str
    start: dt.datetime
    end: dt.datetime

    @property
    def until(self) -> str:
        """The day the next allowance comes (the period's end), as the messages say it."""
        return timezone.localtime(self.end).date().isoformat()


def _midnight(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time()))


def month_of(now: dt.datetime) -> Period:
    local = timezone.localtime(now).date()
    first = local.replace(day=1)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return Period(BudgetPeriod.MONTH, _midnight(first), _midnight(following))


def period_of(budget: Budget, now: dt.datetime) -> Period:
    """The month around ``now``, or the tenant's term (``term_start``–``term_end``, whole
    days); a term budget on a tenant without term dates is a 400 naming ``period``."""
    if budget.period == BudgetPeriod.TERM:
        return term_of(budget.tenant)
    return month_of(now)


def term_of(tenant: Tenant) -> Period:
    if tenant.term_start is None or tenant.term_end is None:
        raise ValidationError(
            {
                "period": _("%(tenant)s has no term dates: set its term, or choose month")
                % {"tenant": tenant.name}
            }
        )
    return Period(
        BudgetPeriod.TERM,
        _midnight(tenant.term_start),
        _midnight(tenant.term_end + dt.timedelta(days=1)),
    )


# --- What remains: lots derived from the ledger ------------------------------------------------


@dataclass
class LotState:
    """One lot and what the ledger has consumed of it up to ``at``."""

    lot: CreditLot
    consumed: Decimal = ZERO
    valid: bool = True  # at ``at``

    @property
    def remaining(self) -> Decimal:
        return self.lot.amount - self.consumed if self.valid else ZERO


@dataclass
class Status:
    """Where a budget stands at ``at``: this period's allowance and the credit granted by hand
    that is valid now, what was spent in the period, what is left (credit at hand less what
    no lot covered), the per cent used of what the period had, and the state."""

    budget: Budget
    period: Period
    allowance: Decimal
    credits: Decimal
    spent: Decimal
    remaining: Decimal
    percent: int
    state: str
    lots: list[LotState] = field(default_factory=list)
    at: dt.datetime | None = None

    @property
    def total(self) -> Decimal:
        return self.spent + self.remaining

    @property
    def tenant(self) -> Tenant:
        return self.budget.tenant

    @property
    def policy(self) -> str:
        return self.budget.policy

    @property
    def policy_label(self) -> str:
        return str(BudgetPolicy(self.budget.policy).label)

    @property
    def exhausted(self) -> bool:
        return self.state == EXHAUSTED

    @property
    def bar_percent(self) -> int:
        return min(self.percent, 100)


def _lot_order(lot: CreditLot) -> tuple[Any, ...]:
    """Credit granted by hand first, then the lot that expires first (never: last)."""
    never = dt.datetime.max.replace(tzinfo=dt.UTC)
    return (lot.source != CreditSource.MANUAL, lot.expires_at or never, lot.granted_at, lot.pk or 0)


def _spend_filter(start: dt.datetime, end: dt.datetime) -> Q:
    return Q(period_start__isnull=False, period_start__gte=start, period_start__lt=end) | Q(
        period_start__isnull=True, created_at__gte=start, created_at__lt=end
    )


def _sums(path: str, edges: Sequence[dt.datetime]) -> list[Decimal]:
    """The spend of the subtree at ``path`` in each stretch between ``edges``: one query."""
    if len(edges) < 2:
        return []
    zero = Value(ZERO, output_field=DecimalField(max_digits=18, decimal_places=6))
    stretches = {
        f"s{i}": Coalesce(Sum("amount", filter=_spend_filter(a, b)), zero)
        for i, (a, b) in enumerate(itertools.pairwise(edges))
    }
    found = (
        LedgerEntry.objects.filter(account__tenant__path__startswith=path)
        .filter(_spend_filter(edges[0], edges[-1]))
        .aggregate(**stretches)
    )
    return [Decimal(found[f"s{i}"]) for i in range(len(edges) - 1)]


def _allowance_lot(budget: Budget, account: Account | None, period: Period) -> CreditLot:
    """The period's allowance lot as written, or as it will be written (not saved)."""
    lot = CreditLot.objects.filter(
        budget=budget, source=CreditSource.ALLOWANCE, granted_at=period.start
    ).first()
    if lot is None:
        lot = CreditLot(
            account=account,
            amount=budget.allowance,
            granted_at=period.start,
            expires_at=period.end,
            source=CreditSource.ALLOWANCE,
            budget=budget,
        )
    return lot


def derive(
    tenant: Tenant, budget: Budget | None, now: dt.datetime
) -> tuple[list[LotState], Decimal, Decimal, Period]:
    """The lots of ``tenant``'s account with what the ledger consumed of each up to ``now``,
    what no lot covered in the current period, and the period's spend.

    From the earliest lot still valid in the period (or the period's start) to ``now``, time
    is cut at every lot's start and expiry and every period start; the spend of each stretch
    (one query for all) consumes the lots valid through it in order (:func:`_lot_order`); a
    lot that becomes valid first pays what was not covered; a negative stretch (a refund)
    gives back to what was not covered, then to the lots, last consumed first. What was not
    covered starts again from zero with each period."""
    period = period_of(budget, now) if budget is not None else month_of(now)
    account = Account.objects.filter(tenant=tenant).first()
    current = _allowance_lot(budget, account, period) if budget is not None else None
    if current is not None and now < period.start:  # a term not begun: its allowance is whole
        return [LotState(current)], ZERO, ZERO, period
    # From the period's start, or earlier where a lot valid then began earlier (credit granted
    # by hand last term): the lots that overlap the window, until no earlier one is found.
    start = period.start
    written = [current.pk] if current is not None and current.pk else []
    while True:
        lots = list(
            CreditLot.objects.filter(account__tenant=tenant, granted_at__lte=now)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=start))
            .exclude(pk__in=written)
        )
        earliest = min([start, *(lot.granted_at for lot in lots)])
        if earliest >= start:
            break
        start = earliest
    if current is not None and period.start <= now:
        lots.append(current)
    lots.sort(key=_lot_order)
    starts = {period.start}
    if budget is None or budget.period == BudgetPeriod.MONTH:
        cursor = month_of(start).start
        while cursor < now:
            starts.add(cursor)
            cursor = month_of(cursor).end
    cuts = {start, now, *starts}
    for lot in lots:
        cuts.add(lot.granted_at)
        if lot.expires_at is not None:
            cuts.add(lot.expires_at)
    edges = sorted(t for t in cuts if start <= t <= now)
    amounts = _sums(tenant.path, edges)
    states = [LotState(lot) for lot in lots]
    uncovered = ZERO
    spent = ZERO
    for (a, b), amount in zip(itertools.pairwise(edges), amounts, strict=True):
        if a in starts:
            uncovered = ZERO
        if a >= period.start:
            spent += amount
        valid = [
            s
            for s in states
            if s.lot.granted_at <= a and (s.lot.expires_at is None or s.lot.expires_at >= b)
        ]
        if uncovered > 0:
            uncovered = _consume(valid, uncovered)
        if amount > 0:
            uncovered += _consume(valid, amount)
        elif amount < 0:
            back = -amount
            taken = min(back, uncovered)
            uncovered -= taken
            back -= taken
            for state in reversed(valid):
                taken = min(back, state.consumed)
                state.consumed -= taken
                back -= taken
    for state in states:
        state.valid = state.lot.granted_at <= now and (
            state.lot.expires_at is None or state.lot.expires_at > now
        )
    return states, uncovered, spent, period


def _consume(valid: list[LotState], amount: Decimal) -> Decimal:
    """Take ``amount`` from the lots in order; what they could not cover."""
    for state in valid:
        take = min(amount, state.lot.amount - state.consumed)
        if take > 0:
            state.consumed += take
            amount -= take
        if amount <= 0:
            return ZERO
    return amount


def status(budget: Budget, now: dt.datetime | None = None) -> Status:
    """Where ``budget`` stands at ``now``: allowance, credits, spent, remaining, percent, state."""
    now = now or timezone.now()
    states, uncovered, spent, period = derive(budget.tenant, budget, now)
    remaining = sum((s.remaining for s in states), ZERO) - uncovered
    allowance = sum(
        (s.lot.amount for s in states if s.lot.source == CreditSource.ALLOWANCE and s.valid), ZERO
    )
    credits = sum(
        (s.lot.amount for s in states if s.lot.source == CreditSource.MANUAL and s.valid), ZERO
    )
    total = spent + remaining
    # Of what the period had (spent + left); with nothing to spend, all of it is used.
    percent = int(max(ZERO, min(spent * 100 / total, Decimal(999)))) if total > 0 else 100
    if remaining <= 0:
        state = EXHAUSTED
    elif budget.thresholds and percent >= min(budget.thresholds):
        state = WARNED
    else:
        state = OK
    return Status(budget, period, allowance, credits, spent, remaining, percent, state, states, now)


def statuses_for(tenant: Tenant, now: dt.datetime | None = None) -> list[Status]:
    """The active budgets that cover ``tenant`` as payer (its own and its ancestors'), each
    with its status; the most used up first."""
    now = now or timezone.now()
    found = []
    for budget in Budget.objects.filter(
        is_active=True, tenant_id__in=tenant.ancestor_ids
    ).select_related("tenant"):
        try:
            found.append(status(budget, now))
        except ValidationError:  # a term budget whose tenant lost its term dates: no period
            continue
    found.sort(key=lambda s: (not s.exhausted, s.remaining))
    return found


def budget_of(tenant: Tenant) -> Status | None:
    """The budget that binds ``tenant`` now (``workloads.costs.budget_of``)."""
    found = statuses_for(tenant)
    return found[0] if found else None


# --- The admission check (registered in workloads.admission_checks) ---------------------------


def _uses_gpu(flavor: Any) -> bool:
    return bool(getattr(flavor, "gpus", 0) or getattr(flavor, "gpu_milli", 0))


def refusal(status: Status, flavor: Any) -> Reason | None:
    """Why ``status``'s budget refuses a start of ``flavor`` now; None: it allows it."""
    if not status.exhausted:
        return None
    words = {"tenant": status.tenant.name, "period": status.period.kind}
    if status.policy == BudgetPolicy.DOWNGRADE:
        if not _uses_gpu(flavor):
            return None
        return BR.GPU_BUDGET_USED_UP(**words, date=status.period.until)
    return BR.BUDGET_USED_UP(**words, date=status.period.until)


def check(ask: Ask, memo: dict[str, Any]) -> Reason | None:
    """``workloads.admission_checks``'s check: a start refused by an exhausted budget of the
    payer (or of a tenant above it). Statuses are kept in ``memo`` per payer."""
    if ask.payer_tenant_id is None:
        return None
    if "billing.any_budget" not in memo:
        memo["billing.any_budget"] = Budget.objects.filter(is_active=True).exists()
    if not memo["billing.any_budget"]:
        return None
    key = f"billing.budgets:{ask.payer_tenant_id}"
    if key not in memo:
        tenant = Tenant.objects.filter(pk=ask.payer_tenant_id).first()
        memo[key] = [s for s in statuses_for(tenant) if s.exhausted] if tenant else []
    for found in memo[key]:
        reason = refusal(found, ask.flavor)
        if reason is not None:
            return reason
    return None


# --- Checking what is given --------------------------------------------------------------------


def _administered(actor: Any, tenant: Tenant) -> None:
    if not Access.of(actor).can_administer(tenant):
        raise PermissionDenied(_("you do not administer %(tenant)s") % {"tenant": tenant.name})


def _amount(name: str, value: Any, *, positive: bool = False) -> Decimal:
    """A sum of money as given (a number or a numeric string), or a 400 naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValidationError({name: _("must be a number, e.g. 50.00")})
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValidationError({name: _("must be a number, e.g. 50.00")}) from None
    if not number.is_finite():
        raise ValidationError({name: _("must be a number, e.g. 50.00")})
    if number < 0 or (positive and number == 0):
        raise ValidationError(
            {name: _("must be more than 0") if positive else _("cannot be negative")}
        )
    if number > MAX_AMOUNT:
        raise ValidationError({name: _("is too large")})
    if number != number.quantize(MICRO):
        raise ValidationError({name: _("must have at most 6 decimals")})
    return number.quantize(MICRO)


def _thresholds(value: Any) -> list[int]:
    if value in (None, ""):
        return [80, 100]
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
    if not isinstance(value, list | tuple) or len(value) > 10:
        raise ValidationError({"thresholds": _("give up to 10 per cents, e.g. 80, 100")})
    found = set()
    for item in value:
        if isinstance(item, bool):
            item = None
        try:
            number = int(str(item))
        except (TypeError, ValueError):
            number = 0
        if not 1 <= number <= 100:
            raise ValidationError(
                {"thresholds": _("each threshold is a whole per cent from 1 to 100")}
            )
        found.add(number)
    return sorted(found)


def _choice(name: str, value: Any, choices: type[Any]) -> str:
    if value not in choices.values:
        raise ValidationError(
            {name: _("must be one of: %(choices)s") % {"choices": ", ".join(choices.values)}}
        )
    return str(value)


def _minutes(value: Any) -> int:
    try:
        number = int(str(value)) if not isinstance(value, bool) else -1
    except (TypeError, ValueError):
        number = -1
    if not 0 <= number <= MAX_GRACE_MINUTES:
        raise ValidationError(
            {
                "stop_grace_minutes": _("must be a whole number of minutes from 0 to %(n)s")
                % {"n": MAX_GRACE_MINUTES}
            }
        )
    return number


def _moment(name: str, value: Any) -> dt.datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, str):
        parsed = parse_datetime(value.strip())
        if parsed is None:
            try:
                parsed = _midnight(dt.date.fromisoformat(value.strip()))
            except ValueError:
                parsed = None
        if parsed is None:
            raise ValidationError({name: _("must be a date and time, e.g. 2025-09-01T00:00Z")})
        value = parsed
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = _midnight(value)
    if not isinstance(value, dt.datetime):
        raise ValidationError({name: _("must be a date and time, e.g. 2025-09-01T00:00Z")})
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value


def _budget_fields(tenant: Tenant, given: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "period" in given:
        fields["period"] = _choice("period", given["period"], BudgetPeriod)
        if fields["period"] == BudgetPeriod.TERM:
            term_of(tenant)  # a 400 naming period where the tenant has no term
    if "allowance" in given:
        fields["allowance"] = _amount("allowance", given["allowance"])
    if "thresholds" in given:
        fields["thresholds"] = _thresholds(given["thresholds"])
    if "policy" in given:
        fields["policy"] = _choice("policy", given["policy"], BudgetPolicy)
    if "stop_grace_minutes" in given:
        fields["stop_grace_minutes"] = _minutes(given["stop_grace_minutes"])
    return fields


BUDGET_FIELDS = ("period", "allowance", "thresholds", "policy", "stop_grace_minutes")


# --- Services ----------------------------------------------------------------------------------


def _sync_allowance(budget: Budget, now: dt.datetime) -> None:
    """The current period's allowance lot follows the budget (its amount, its period); an
    allowance lot of this budget from another period that is still valid ends now."""
    if not budget.is_active:
        CreditLot.objects.filter(
            budget=budget, source=CreditSource.ALLOWANCE, expires_at__gt=now
        ).update(expires_at=now)
        return
    period = period_of(budget, now)
    CreditLot.objects.filter(
        budget=budget, source=CreditSource.ALLOWANCE, expires_at__gt=now
    ).exclude(granted_at=period.start).update(expires_at=now)
    account = account_for_tenant(budget.tenant)
    lot = _allowance_lot(budget, account, period)
    if lot.pk is None:
        try:
            with transaction.atomic():
                lot.save()
        except IntegrityError:  # written meanwhile by the tick
            pass
    elif lot.amount != budget.allowance or lot.expires_at != period.end:
        CreditLot.objects.filter(pk=lot.pk).update(amount=budget.allowance, expires_at=period.end)


@transaction.atomic
def create_budget(
    *, actor: Any, tenant: Tenant, now: dt.datetime | None = None, **given: Any
) -> Budget:
    """A budget for ``tenant`` (admins of the tenant, superusers); one active per tenant."""
    _administered(actor, tenant)
    unknown = set(given) - set(BUDGET_FIELDS)
    if unknown:
        raise ValidationError({name: _("is not a budget field") for name in sorted(unknown)})
    given.setdefault("period", BudgetPeriod.MONTH)
    given.setdefault("thresholds", None)
    if "allowance" not in given:
        raise ValidationError({"allowance": _("give the allowance per period, e.g. 500")})
    fields = _budget_fields(tenant, given)
    if Budget.objects.filter(tenant=tenant, is_active=True).exists():
        raise ValidationError(
            {"tenant": _("%(tenant)s already has a budget: change it") % {"tenant": tenant.name}}
        )
    now = now or timezone.now()
    budget = Budget.objects.create(tenant=tenant, created_by=actor, **fields)
    _sync_allowance(budget, now)
    record("budget.create", actor=actor, target=budget, tenant=tenant, **fields)
    return budget


@transaction.atomic
def update_budget(
    *, actor: Any, budget: Budget, now: dt.datetime | None = None, **given: Any
) -> Budget:
    """Change a budget's allowance, period, thresholds, policy or grace; audited with what
    each field was and is now. The current period's allowance lot follows the new allowance."""
    _administered(actor, budget.tenant)
    unknown = set(given) - set(BUDGET_FIELDS)
    if unknown:
        raise ValidationError({name: _("is not a budget field") for name in sorted(unknown)})
    fields = _budget_fields(budget.tenant, given)
    changes = {
        name: {"from": getattr(budget, name), "to": value}
        for name, value in fields.items()
        if getattr(budget, name) != value
    }
    for name, value in fields.items():
        setattr(budget, name, value)
    budget.save()
    if changes:
        _sync_allowance(budget, now or timezone.now())
        record("budget.update", actor=actor, target=budget, tenant=budget.tenant, **changes)
    return budget


@transaction.atomic
def deactivate_budget(*, actor: Any, budget: Budget, now: dt.datetime | None = None) -> Budget:
    """A budget that no longer applies: nothing is refused or stopped by it; its current
    allowance lot ends now. Its history (lots, alerts) stays."""
    _administered(actor, budget.tenant)
    if budget.is_active:
        budget.is_active = False
        budget.save(update_fields=["is_active", "updated_at"])
        _sync_allowance(budget, now or timezone.now())
        record("budget.deactivate", actor=actor, target=budget, tenant=budget.tenant)
    return budget


@transaction.atomic
def grant_credit(
    *,
    actor: Any,
    tenant: Tenant,
    amount: Any,
    expires_at: Any = None,
    note: str = "",
    now: dt.datetime | None = None,
) -> CreditLot:
    """A lot of credit for ``tenant``'s account from now until ``expires_at`` (empty: no end);
    it is consumed before the allowance. Admins of the tenant, superusers; audited."""
    _administered(actor, tenant)
    now = now or timezone.now()
    value = _amount("amount", amount, positive=True)
    expires = _moment("expires_at", expires_at)
    if expires is not None and expires <= now:
        raise ValidationError({"expires_at": _("must be in the future")})
    if not isinstance(note, str) or len(note) > 200:
        raise ValidationError({"note": _("must be a text of at most 200 characters")})
    lot = CreditLot.objects.create(
        account=account_for_tenant(tenant),
        amount=value,
        granted_at=now,
        expires_at=expires,
        source=CreditSource.MANUAL,
        note=note.strip(),
        created_by=actor,
    )
    record(
        "credit.grant",
        actor=actor,
        target=lot,
        tenant=tenant,
        amount=str(value),
        expires_at=expires.isoformat() if expires else None,
        note=lot.note,
    )
    return lot


# --- After each settlement tick ----------------------------------------------------------------


@dataclass
class Evaluation:
    budgets: int = 0
    alerts: int = 0
    notices: int = 0
    stopped: list[str] = field(default_factory=list)


def evaluate(now: dt.datetime | None = None) -> Evaluation:
    """Every active budget: this period's allowance lot written, thresholds crossed noticed
    once each per period (``BudgetAlert`` is the once), and a used-up stop-policy budget's
    running work stopped once its grace after the 100 % warning has passed."""
    now = now or timezone.now()
    done = Evaluation()
    for budget in Budget.objects.filter(is_active=True).select_related("tenant"):
        try:
            found = status(budget, now)
        except ValidationError:  # a term budget whose tenant lost its term dates
            continue
        done.budgets += 1
        _sync_allowance(budget, now)
        crossed = {t for t in budget.thresholds if found.percent >= t}
        if found.exhausted:
            crossed.add(100)
        for threshold in sorted(crossed):
            _alert_row, made = _alert(budget, found.period, threshold, now)
            if made:
                done.alerts += 1
                done.notices += len(_notify(found, threshold))
        if budget.policy == BudgetPolicy.STOP:
            done.stopped += _stop_policy(found, now, done)
    return done


def _stop_policy(found: Status, now: dt.datetime, done: Evaluation) -> list[str]:
    """A used-up stop-policy budget stops its payer's work once ``stop_grace_minutes`` have
    passed since it was used up (``BudgetAlert.exhausted_since``, set with the 100 % warning).
    Credit that makes it no longer used up clears that; used up again, it warns again and
    the grace starts again."""
    budget, period = found.budget, found.period
    alerts = BudgetAlert.objects.filter(budget=budget, period_start=period.start, threshold=100)
    if not found.exhausted:
        alerts.filter(exhausted_since__isnull=False).update(exhausted_since=None)
        return []
    alert = alerts.get()
    if alert.exhausted_since is None:  # used up again after credit was granted
        if alerts.filter(exhausted_since__isnull=True).update(exhausted_since=now):
            done.notices += len(_notify(found, 100, again=now))
        alert.refresh_from_db()
    assert alert.exhausted_since is not None
    if now < alert.exhausted_since + dt.timedelta(minutes=budget.stop_grace_minutes):
        return []
    stopped = _stop_work(found)
    if alert.stopped_at is None:
        alerts.update(stopped_at=now)
    return stopped


def _alert(
    budget: Budget, period: Period, threshold: int, now: dt.datetime
) -> tuple[BudgetAlert, bool]:
    try:
        with transaction.atomic():
            return BudgetAlert.objects.get_or_create(
                budget=budget,
                period_start=period.start,
                threshold=threshold,
                defaults={"created_at": now, "exhausted_since": now if threshold >= 100 else None},
            )
    except IntegrityError:  # made meanwhile by another tick
        return (
            BudgetAlert.objects.get(budget=budget, period_start=period.start, threshold=threshold),
            False,
        )


def recipients(budget: Budget, period: Period) -> tuple[list[Any], list[Any]]:
    """Who hears of a budget: its tenant's teachers, TAs and admins (and the admins above
    it); and the people who launched work paid by the subtree in the period."""
    tenant = budget.tenant
    staff = Membership.objects.filter(
        Q(tenant=tenant, role__in=MANAGING_ROLES)
        | Q(tenant_id__in=tenant.ancestor_ids[:-1], role__in=ADMIN_ROLES)
    ).select_related("user")
    managers = {m.user_id: m.user for m in staff}
    launched = (
        Workload.objects.filter(payer_tenant__path__startswith=tenant.path)
        .filter(Q(created_at__gte=period.start) | Q(state__in=ACTIVE))
        .values_list("owner_id", flat=True)
        .distinct()
    )
    students = get_user_model().objects.filter(pk__in=launched).exclude(pk__in=list(managers))
    return list(managers.values()), list(students)


def _notify(found: Status, threshold: int, again: dt.datetime | None = None) -> list[Notice]:
    budget, period = found.budget, found.period
    words = {"tenant": budget.tenant.name, "period": period.kind}
    if threshold >= 100 and found.exhausted:
        level = Notice.Level.ERROR
        if budget.policy == BudgetPolicy.DOWNGRADE:
            reason = BR.BUDGET_EXHAUSTED_DOWNGRADE(**words, date=period.until)
        elif budget.policy == BudgetPolicy.STOP:
            reason = BR.BUDGET_EXHAUSTED_STOP(**words, n=budget.stop_grace_minutes)
        else:
            reason = BR.BUDGET_EXHAUSTED_BLOCK(**words, date=period.until)
    else:
        level = Notice.Level.WARNING
        reason = BR.BUDGET_THRESHOLD(
            **words,
            percent=threshold,
            spent=f"{found.spent:.2f}",
            total=f"{found.total:.2f}",
        )
    key = f"budget:{budget.pk}:{period.start:%Y%m%d}:{threshold}"
    if again is not None:  # used up again in the same period: a warning of its own
        key += f":{again:%Y%m%d%H%M%S}"
    managers, students = recipients(budget, period)
    if budget.tenant.kind in (TenantKind.CLASS, TenantKind.PROJECT):
        staff_link = reverse("teaching-class", args=[budget.tenant.slug])
    else:
        staff_link = reverse("console-budgets")
    made = notices.notify(managers, reason, level=level, dedupe_key=key, link=staff_link)
    made += notices.notify(
        students, reason, level=level, dedupe_key=key, link=reverse("app-center")
    )
    return made


def _stop_work(found: Status) -> list[str]:
    reason = BR.STOPPED_BUDGET_USED_UP(tenant=found.tenant.name, period=found.period.kind)
    stopped = []
    for workload in (
        Workload.objects.filter(payer_tenant__path__startswith=found.tenant.path, state__in=ACTIVE)
        .exclude(state=State.STOPPING)
        .select_related("owner", "tenant")
    ):
        if workload_services.stop(actor=None, workload=workload, reason=reason):
            stopped.append(str(workload.pk))
    return stopped


def visible_budgets(user: Any) -> Q:
    """Budgets one person sees: those of the tenants they manage (and superusers all)."""
    return Access.of(user).tenant_filter(MANAGING_ROLES, prefix="tenant__")


def lots_of(tenants: Iterable[Tenant], now: dt.datetime | None = None) -> dict[int, LotState]:
    """What remains of each lot of ``tenants``' accounts (by lot id), derived from the ledger."""
    now = now or timezone.now()
    found: dict[int, LotState] = {}
    for tenant in tenants:
        budget = Budget.objects.filter(tenant=tenant, is_active=True).first()
        try:
            states, _uncovered, _spent, _period = derive(tenant, budget, now)
        except ValidationError:
            states, _uncovered, _spent, _period = derive(tenant, None, now)
        for state in states:
            if state.lot.pk is not None:
                found[state.lot.pk] = state
    return found
