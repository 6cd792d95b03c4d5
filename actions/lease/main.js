// The action's main step: lease from the pool with the job's OIDC token, wait until the lease is
// bound, write its kubeconfig under RUNNER_TEMP, and hand it to the job's later steps. The lease
// id is saved for the post step the moment the lease exists, so however the job ends from then
// on, post releases it. A cancel during the wait (the runner's SIGINT, then SIGTERM) releases it
// here at once as well.
"use strict";

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const lessor = require("./lessor.js");

const LONG_POLL_S = 20; // each GET answers when the lease changes, or after this long
const CREDENTIAL = /^\s*(token|client-key-data|client-certificate-data|password):\s*["']?([^\s"']+)/gm;

async function main() {
  const endpoint = lessor.endpointUrl(lessor.input("endpoint", { required: true }));
  const pool = lessor.input("pool", { required: true });
  const ttl = lessor.input("ttl");
  const alias = lessor.input("name");
  const waitMs = lessor.durationMs("wait-timeout", lessor.input("wait-timeout") || "10m");
  if (ttl) lessor.durationMs("ttl", ttl); // a typo fails here, before any lease
  const ca = lessor.input("ca-certificate");
  if (ca && !ca.includes("-----BEGIN CERTIFICATE-----")) {
    throw new lessor.ActionError("ca-certificate: not a PEM certificate");
  }
  const api = new lessor.Api(endpoint, new lessor.JobToken(lessor.input("audience") || "lessor"), ca);
  const cancel = new Cancel(api);

  const body = { profile: pool };
  if (ttl) body.ttl = ttl;
  if (alias) body.alias = alias;
  const created = await api.ok("POST", "/v1/leases", body);
  const id = lessor.leaseId(created);
  lessor.saveState("lease_id", id);
  lessor.info(`lease ${id} from ${pool}: ${created.phase}`);
  cancel.holding(id);

  const lease = await bound(api, id, Date.now() + waitMs);
  if (!lease) {
    const outcome = await api.release(id);
    throw new lessor.ActionError(`lease ${id} was not bound within ${lessor.input("wait-timeout") || "10m"}; ${outcome}`);
  }
  for (const [, , secret] of lease.kubeconfig.matchAll(CREDENTIAL)) lessor.command("add-mask", secret);
  const directory = process.env.RUNNER_TEMP || fs.mkdtempSync(path.join(os.tmpdir(), "lessor-"));
  const file = path.join(directory, `lessor-${id}.kubeconfig`);
  fs.writeFileSync(file, lease.kubeconfig, { mode: 0o600 });
  lessor.saveState("kubeconfig", file);
  lessor.setOutput("kubeconfig", file);
  lessor.setOutput("lease-id", id);
  lessor.setOutput("expires-at", lease.expires_at || "");
  if (lessor.input("export-kubeconfig") !== "false") {
    lessor.exportVariable("KUBECONFIG", file);
    lessor.exportVariable("LESSOR_LEASE_ID", id);
  }
  lessor.info(`lease ${id} is bound until ${lease.expires_at}; kubeconfig ${file}`);
}

/** The lease once bound with its kubeconfig; null when the deadline passes first. Long polls:
 * the kubeconfig arrives the moment the lease is bound. */
async function bound(api, id, deadline) {
  let shown = "";
  for (;;) {
    const wait = Math.max(0, Math.min(LONG_POLL_S, Math.floor((deadline - Date.now()) / 1000)));
    const started = Date.now();
    const lease = await api.ok("GET", `/v1/leases/${id}?waitSeconds=${wait}`, undefined, {
      timeoutMs: (wait + 30) * 1000,
    });
    if (lease.phase === "Bound" && lease.kubeconfig) return lease;
    if (["Released", "Expired", "Recycling", "Quarantined"].includes(lease.phase)) {
      throw new lessor.ActionError(`lease ${id} ended while waiting: ${lease.phase}`);
    }
    const line = `lease ${id}: ${lease.phase}${lease.queue_position ? `, queue position ${lease.queue_position}` : ""}`;
    if (line !== shown) lessor.info(line);
    shown = line;
    if (Date.now() >= deadline) return null;
    // A server that answers at once without waiting is not asked in a tight loop.
    if (Date.now() - started < 500) await lessor.sleep(1000);
  }
}

/** A cancelled job: the runner sends SIGINT, then SIGTERM 7.5 s later. The lease is released on
 * the first (or as soon as it exists, when the cancel came while it was being created) and the
 * second is ignored while that is under way; post releases again if this one failed. */
class Cancel {
  constructor(api) {
    this.api = api;
    this.id = "";
    this.signal = "";
    process.on("SIGINT", () => this.received("SIGINT"));
    process.on("SIGTERM", () => this.received("SIGTERM"));
  }

  received(signal) {
    if (this.signal) return;
    this.signal = signal;
    if (this.id) this.release();
    else lessor.info(`cancelled (${signal}) while the lease is created`);
  }

  holding(id) {
    this.id = id;
    if (this.signal) this.release();
  }

  release() {
    lessor.info(`cancelled (${this.signal}): releasing lease ${this.id}`);
    this.api
      .release(this.id)
      .then((outcome) => lessor.info(`lease ${this.id}: ${outcome}`))
      .catch((error) => lessor.command("warning", `${error.message}; the post step tries again`))
      .finally(() => process.exit(1));
  }
}

lessor.step(main);
