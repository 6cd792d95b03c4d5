"""The one retry rule of every component."""

from lessor.protocol.backoff import Backoff


def test_the_backoff_doubles_up_to_its_cap_less_its_jitter() -> None:
    backoff = Backoff(first=0.5, cap=30.0, jitter=0.5)
    for attempt, longest in ((0, 0.5), (1, 1.0), (2, 2.0), (10, 30.0), (5000, 30.0)):
        for _ in range(20):
            assert longest / 2 <= backoff.delay(attempt) <= longest
    assert Backoff(first=1.0, jitter=0.0).delay(3) == 8.0
