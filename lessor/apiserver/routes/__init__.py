"""The top of the API server: the route table and the Falcon app made from it, the services it
wires together, the OpenAPI document and its reference, and the settings."""
