"""The plans file (``PLANS_FILE``): the shipped default, exact money, and one line naming
the plan and the field for every mistake an operator can make."""

from __future__ import annotations

from pathlib import Path

import pytest

from budget.plans import PlansFileError, load_plans, parse_plans
from budget.types import Window


def test_the_shipped_file_has_free_and_pro() -> None:
    """Without PLANS_FILE the shipped plans apply: ``free`` (the bot as configured: no
    limit of its own) is the default, ``pro`` has its own limits and a Stars price."""
    plans = load_plans(None)
    assert plans.default == "free" and list(plans.by_name) == ["free", "pro"]
    free, pro = plans.by_name["free"], plans.by_name["pro"]
    assert (free.limits.user_musd, free.limits.max_inflight, free.stars) == ({}, None, None)
    assert pro.limits.user_musd == {
        Window.HOUR: 250_000,
        Window.DAY: 1_000_000,
        Window.MONTH: 10_000_000,
    }
    assert (pro.limits.max_inflight, pro.limits.per_minute, pro.priority) == (3, 30, 5)
    assert (pro.stars, pro.period_days, pro.features.max_subscriptions) == (250, 30, 50)
    assert plans.get("gone").name == "free"


def test_money_is_exact_and_off_means_no_limit(tmp_path: Path) -> None:
    """0.000001 USD is 1 µUSD, "off" is no limit, totals go to the plan's own level."""
    path = tmp_path / "plans.toml"
    path.write_text(
        'default = "a"\n[a]\nday_usd = 0.000001\nhour_usd = "off"\ntotal_month_usd = 12.5\n'
    )
    plan = load_plans(path).by_name["a"]
    assert plan.limits.user_musd == {Window.DAY: 1, Window.HOUR: None}
    assert plan.limits.total_musd == {Window.MONTH: 12_500_000}


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('default = "a"\n[a]\nday_usd = -1\n', ("'a'", "'day_usd'")),
        ('default = "a"\n[a]\nday_usd = 0.0000001\n', ("'a'", "'day_usd'", "six decimals")),
        ('default = "a"\n[a]\nday_usd = "lots"\n', ("'a'", "'day_usd'")),
        ('default = "a"\n[a]\nconcurrency = 0\n', ("'a'", "'concurrency'")),
        ('default = "a"\n[a]\npriority = 10\n', ("'a'", "'priority'")),
        ('default = "a"\n[a]\nmedia = "yes"\n', ("'a'", "'media'")),
        ('default = "a"\n[a]\ndaily_usd = 1\n', ("'a'", "'daily_usd'", "unknown field")),
        ('default = "a"\n[a]\nstars = 1.5\n', ("'a'", "'stars'")),
        ('default = "b"\n[a]\n', ("'default'",)),
        ("[a]\n", ("'default'",)),
        ('default = "A"\n[A]\n', ("'A'",)),
        ('default = "a"\n[a\n', ("not valid TOML",)),
        ('default = "a"\n', ("no plan",)),
    ],
)
def test_every_mistake_is_one_line_naming_plan_and_field(text: str, names: tuple[str, ...]) -> None:
    """A bad file raises PlansFileError whose message is one line with the file, the plan
    and the field (what the bot prints before exiting 2)."""
    with pytest.raises(PlansFileError) as exc:
        parse_plans(text, "plans.toml")
    message = str(exc.value)
    assert "\n" not in message and message.startswith("PLANS_FILE plans.toml")
    for name in names:
        assert name in message


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    """A missing file names itself."""
    with pytest.raises(PlansFileError, match="cannot read it"):
        load_plans(tmp_path / "missing.toml")
