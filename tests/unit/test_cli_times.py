"""How the CLI says times: an event's age as kubectl does (`lessor get LEASE`'s Events), and an
expiry as how far away it is (`lessor get`, `lessor lease`)."""

from __future__ import annotations

import datetime

import pytest

from lessor.cli import output


def _ago(seconds: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("seconds", "said"), [(5, "5s"), (59, "59s"), (61, "1m"), (7200, "2h"), (3 * 86400, "3d")]
)
def test_an_age_is_said_as_kubectl_says_it(seconds: float, said: str) -> None:
    assert output.age(_ago(seconds + 0.3)) == said


def test_a_time_that_is_not_one_is_shown_as_it_came() -> None:
    assert output.age("yesterday") == "yesterday"
    assert output.relative("yesterday") == "yesterday"
    assert output.age(None) == output.relative(None) == "-"


def test_an_expiry_is_how_far_away_it_is() -> None:
    assert output.relative(_ago(-(3600 + 125.5))) == "in 1h2m"
    assert output.relative(_ago(10)) == "passed"
