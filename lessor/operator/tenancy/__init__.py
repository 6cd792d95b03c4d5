"""What bounds tenants across both kinds of lease: AccessPolicy status and the reservations
that cap a tenant's leases."""
