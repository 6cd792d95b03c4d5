"""AccessPolicies: kept in memory (`store`) and evaluated for a caller (`evaluation`)."""
