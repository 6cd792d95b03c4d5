"""lessor's side of the integration with the external agent-sandbox controller."""
