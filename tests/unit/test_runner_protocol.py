"""The in-sandbox runner is one standard-library file and declares its own bounds; the API
promises its callers the ones in lessor.protocol.runner. They must be the same numbers."""

from lessor.protocol import runner as promised
from lessor.protocol.phases import EXECUTION_FINISHED
from lessor.runner import runner


def test_the_runner_keeps_and_serves_what_the_api_promises() -> None:
    assert runner.CAP == promised.OUTPUT_CAP
    assert runner.WINDOW == promised.LOG_WINDOW


def test_the_runner_reports_the_finished_states_the_api_knows() -> None:
    assert set(runner.TERMINAL) == EXECUTION_FINISHED
