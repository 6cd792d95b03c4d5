"""The lessor API server: a stateless Falcon application under gunicorn with gevent workers.

Sub-packages, one per subsystem; a module imports across them, never into a package's
`__init__`, which stay empty so that the gunicorn master (which imports only `server` and the
light modules it names) loads nothing with sockets or threads before it forks:

- `http/`: the HTTP surface. The Falcon app, its authentication middleware and its one route
  table (`app`), request bodies (`bodies`, and the `Json` alias every module uses), response
  bodies (`responses`), the error contract (`errors`), the OpenAPI document made from the route
  table and the models, and the reference rendered from it (`openapi`, `reference`), metrics,
  the worker's lifecycle, and the settings.
- `state/`: where a stateless server keeps its state. The Kubernetes client (`kube`), fenced
  writes of intent with the one retry on conflict and the one backoff (`fencing`), ConfigMaps
  that expire (`expiring_records`), and what the workers of one replica share (`replica_db`,
  and the admission rate limit on it).
- `auth/`: who is calling. The `authenticator` over OIDC, static tokens, SSH signatures and
  login sessions (`sessions`), with the SSH nonces shared by every replica (`nonces`).
- `policy/`: AccessPolicies. `store` keeps the current set in memory (listed, then watched);
  `evaluation` decides what a policy's rules grant a caller.
- `leases/`: cluster leases (`cluster_leases`), pools and /v1/status (`pools`), and the ceilings
  that span replicas (`reservations`).
- `sandboxes/`: Sandbox leases, their executions, whether the Sandbox API is served (`gate`),
  and attach/port-forward (`streams`, `stream_bridge`, `websocket`, `upgrade`,
  `stream_slots`).

Entry points stay at the top: `python -m lessor.apiserver` and `lessor apiserver` both run
`lessor.apiserver.server:main`, which loads `lessor.apiserver.http.app:create_app` in each
worker.
"""
