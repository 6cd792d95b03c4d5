"""The HTTP core, under every feature of the API server: the error contract, request and
response bodies, the base of every resource, the middleware that observes and sheds requests,
metrics, audit records and the worker's lifecycle. It imports nothing else of the API server
(the bottom layer of the import contract), so every feature may use it."""
