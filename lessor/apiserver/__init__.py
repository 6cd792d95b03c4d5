"""The lessor API server: a stateless Falcon application under gunicorn with gevent workers.

Sub-packages, one per subsystem; a module imports across them, never into a package's
`__init__`, which stay empty so that the gunicorn master (which imports only `server` and the
light modules it names) loads nothing with sockets or threads before it forks. Top to
bottom, each importing only the ones below it (the import contract in pyproject.toml):

- `routes/`: the top. The one route table and the Falcon app made from it (`app`), the
  per-process services it wires (`services`), the OpenAPI document made from the table and the
  models, and the reference rendered from it (`openapi`, `reference`), and the settings.
- `sandboxes/`: Sandbox leases, their executions, whether the Sandbox API is served (`gate`),
  attach/port-forward (`streams`, `stream_bridge`, `websocket`, `upgrade`), and the Falcon
  resources of it all (`resources`).
- `leases/`: cluster leases (`cluster_leases`), pools and /v1/status (`pools`), the ceilings
  that span replicas (`reservations`), and their resources.
- `auth/`: who is calling. The `authenticator` over OIDC, static tokens, SSH signatures and
  login sessions (`sessions`), with the SSH nonces shared by every replica (`nonces`); the
  middleware that authenticates every request that needs it (`middleware`); /v1/login.
- `policy/`: AccessPolicies. `store` keeps the current set in memory (listed, then watched);
  `evaluation` decides what a policy's rules grant a caller.
- `state/`: where a stateless server keeps its state. The Kubernetes client (`kube`), fenced
  writes of intent with the one retry on conflict and the one backoff (`fencing`), ConfigMaps
  that expire (`expiring_records`), and what the workers of one replica share (`replica_db`,
  and on it the admission rate limit, the session slots and the bounds of held requests).
- `http/`: the core under everything. The error contract (`errors`), request and response
  bodies (`bodies`, `responses`), the base of every resource (`resource`) and what a responder
  declares it answers (`answers`, `queries`), the middleware that observes and sheds requests,
  metrics, audit records and the worker's lifecycle.

Entry points stay at the top: `python -m lessor.apiserver` and `lessor apiserver` both run
`lessor.apiserver.server:main`, which loads `lessor.apiserver.routes.app:create_app` in each
worker.
"""
