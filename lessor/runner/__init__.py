"""The in-sandbox execution runner (lessor.runner.runner): standard library only."""
