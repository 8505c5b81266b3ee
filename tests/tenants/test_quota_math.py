"""The pure quota arithmetic: which limit refuses, and what the message says."""

from decimal import Decimal

from tenants.quota import Level, Request, check, over_use, refusals


def level(name: str, kind: str, **kw: object) -> Level:
    limits = {k: v for k, v in kw.items() if not k.startswith(("used_", "member"))}
    used = {k.removeprefix("used_"): v for k, v in kw.items() if k.startswith("used_")}
    return Level(tenant=name, kind=kind, limits=limits, used=used)  # type: ignore[arg-type]


def test_a_request_within_every_limit_is_admitted() -> None:
    chain = [
        level("Uni", "organisation", gpus=16, used_gpus=3),
        level("CS", "department", gpus=8, used_gpus=3),
        level("ML-101", "class", gpus=4, used_gpus=1),
    ]
    assert check(Request(gpus=Decimal(2)), chain) is None


def test_the_class_limit_refuses_with_its_numbers() -> None:
    chain = [
        level("Uni", "organisation", gpus=16, used_gpus=4),
        level("ML-101", "class", gpus=4, used_gpus=4),
    ]
    refusal = check(Request(gpus=Decimal(1)), chain)
    assert refusal is not None
    assert refusal.message == "class ML-101: 4 of 4 GPUs in use (asked for 1)"


def test_a_full_department_refuses_even_when_its_class_has_room() -> None:
    chain = [
        level("Uni", "organisation", gpus=16, used_gpus=8),
        level("CS", "department", gpus=8, used_gpus=8),
        level("ML-101", "class", gpus=4, used_gpus=0),
    ]
    refusal = check(Request(gpus=Decimal(1)), chain)
    assert refusal is not None and refusal.tenant == "CS"


def test_the_tightest_limit_is_named_when_several_refuse() -> None:
    chain = [
        level("Uni", "organisation", gpus=10, used_gpus=9.5),
        level("ML-101", "class", gpus=4, used_gpus=4),
    ]
    found = refusals(Request(gpus=Decimal(2)), chain)
    assert {r.tenant for r in found} == {"Uni", "ML-101"}
    assert check(Request(gpus=Decimal(2)), chain).tenant == "ML-101"  # type: ignore[union-attr]


def test_fractional_gpus_add_up_exactly() -> None:
    chain = [level("SP-210", "class", gpus=Decimal("1.5"), used_gpus=Decimal("1.25"))]
    assert check(Request(gpus=Decimal("0.25")), chain) is None
    assert check(Request(gpus=Decimal("0.5")), chain) is not None


def test_a_member_limit_speaks_to_the_member() -> None:
    chain = [
        Level(
            tenant="ML-101",
            kind="class",
            limits={"environments": 10},
            used={"environments": 2},
            member_limits={"member_environments": 1},
            member_used={"environments": 1},
        ),
    ]
    refusal = check(Request(environments=1), chain)
    assert refusal is not None and refusal.per_member
    assert refusal.message == "class ML-101: you use 1 of your 1 environments (asked for 1)"


def test_used_up_gpu_hours_refuse_gpu_work_but_not_cpu_work() -> None:
    chain = [
        Level(
            tenant="ML-101",
            kind="class",
            limits={},
            used={},
            gpu_hours_limit=100,
            gpu_hours_used=Decimal("100.5"),
        )
    ]
    refusal = check(Request(gpus=Decimal(1)), chain)
    assert refusal is not None
    assert "GPU-hours for this term are used up" in refusal.message
    assert check(Request(cpu_cores=Decimal(2)), chain) is None


def test_unlimited_levels_never_refuse() -> None:
    chain = [level("Uni", "organisation", gpus=None, used_gpus=1000)]
    assert check(Request(gpus=Decimal(64)), chain) is None


def test_over_use_lists_limits_set_below_use() -> None:
    assert over_use(
        {"gpus": 2, "jobs": None, "environments": 5}, {"gpus": 3, "jobs": 9, "environments": 5}
    ) == ["gpus"]
