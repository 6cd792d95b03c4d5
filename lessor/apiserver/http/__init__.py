"""The HTTP surface: the Falcon app, its routes, bodies, errors and OpenAPI document."""
