"""HTTP plumbing: dependencies, query parameters, limits, error handlers, middleware,
OpenAPI constraints."""
