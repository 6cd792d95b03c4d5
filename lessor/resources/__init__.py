"""pydantic models of every lessor CRD: the single source of truth for their schemas."""
