// What main.js and post.js share: the runner's contract (inputs, file commands, masking), the
// job's OIDC token, and lessor's HTTP API with the CLI's rules (lessor/cli/client.py): retry a
// 429 or 503 that says when (Retry-After) within a budget, retry a read that got no answer, never
// send a create twice. Node's standard library only: an action ships what it runs.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const https = require("node:https");
const os = require("node:os");
const tls = require("node:tls");

const REQUEST_TIMEOUT_MS = 30_000;
const RETRY_BUDGET_MS = 120_000;
const MAX_ANSWER_BYTES = 4 * 1024 * 1024; // a lease with its kubeconfig is a few KiB
const TOKEN_MARGIN_S = 60; // a job token this close to its expiry is asked for again
const LEASE_ID = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

class ActionError extends Error {}

// --- The runner's contract -------------------------------------------------------------------

/** An input as the runner passes it: INPUT_<NAME>, upper case, spaces as underscores. */
function input(name, { required = false } = {}) {
  const value = (process.env[`INPUT_${name.replace(/ /g, "_").toUpperCase()}`] || "").trim();
  if (required && !value) throw new ActionError(`input ${name} is required`);
  return value;
}

function escapeData(text) {
  return String(text).replace(/%/g, "%25").replace(/\r/g, "%0D").replace(/\n/g, "%0A");
}

/** A workflow command on stdout (`::add-mask::`, `::warning::`, `::error::`). */
function command(name, message) {
  process.stdout.write(`::${name}::${escapeData(message)}${os.EOL}`);
}

function info(message) {
  process.stdout.write(`${message}${os.EOL}`);
}

/** One entry of a file command (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_STATE), in the heredoc form,
 * so no value can end the entry early or add one of its own. */
function fileCommand(kind, name, value) {
  const path = process.env[`GITHUB_${kind}`];
  if (!path) throw new ActionError(`GITHUB_${kind} is not set: not run by a GitHub Actions runner`);
  const delimiter = `ghadelimiter_${crypto.randomUUID()}`;
  const text = String(value);
  if (name.includes(delimiter) || text.includes(delimiter)) {
    throw new ActionError(`${name}: value contains the delimiter`);
  }
  fs.appendFileSync(path, `${name}<<${delimiter}${os.EOL}${text}${os.EOL}${delimiter}${os.EOL}`);
}

const setOutput = (name, value) => fileCommand("OUTPUT", name, value);
const saveState = (name, value) => fileCommand("STATE", name, value);
const exportVariable = (name, value) => fileCommand("ENV", name, value);

/** What main saved for post: the runner hands it over as STATE_<name>. */
const state = (name) => process.env[`STATE_${name}`] || "";

/** Run a step: any error is one `::error::` line and a failed step, never a stack trace. */
function step(body) {
  body().catch((error) => {
    command("error", error instanceof ActionError ? error.message : `unexpected: ${error.stack}`);
    process.exitCode = 1;
  });
}

// --- Inputs that need checking ---------------------------------------------------------------

/** https, or http to this machine only: a job's token must not cross a network in clear. */
function endpointUrl(text) {
  let url;
  try {
    url = new URL(text);
  } catch {
    throw new ActionError(`endpoint ${JSON.stringify(text)} is not a URL`);
  }
  const loopback = ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) {
    throw new ActionError(`endpoint ${text}: https is required (http only to localhost)`);
  }
  return url.origin + url.pathname.replace(/\/+$/, "");
}

/** A duration as lessor writes them (90s, 10m, 1h30m) in milliseconds. */
function durationMs(name, text) {
  const units = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
  const parts = [...text.matchAll(/(\d+)([smhd])/g)];
  if (!text || parts.map((p) => p[0]).join("") !== text) {
    throw new ActionError(`${name}: ${JSON.stringify(text)} is not a duration like 90s, 10m or 1h30m`);
  }
  return parts.reduce((total, [, count, unit]) => total + Number(count) * units[unit], 0);
}

function leaseId(answer) {
  const id = answer && answer.id;
  if (typeof id !== "string" || !LEASE_ID.test(id)) {
    throw new ActionError("the server answered with a malformed lease id");
  }
  return id;
}

// --- HTTP -------------------------------------------------------------------------------------

/** One request; resolves with { status, headers, text }, rejects with { lost } when no answer
 * came and { received: true } when the status arrived and the body did not. */
function request(method, url, { headers = {}, body, ca, timeoutMs = REQUEST_TIMEOUT_MS } = {}) {
  const target = new URL(url);
  const transport = target.protocol === "https:" ? https : http;
  const options = { method, headers: { ...headers }, timeout: timeoutMs };
  if (ca && transport === https) options.ca = [...tls.rootCertificates, ca];
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.headers["Content-Length"] = Buffer.byteLength(body);
  }
  return new Promise((resolve, reject) => {
    const req = transport.request(target, options, (res) => {
      const chunks = [];
      let size = 0;
      res.on("data", (chunk) => {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) {
          req.destroy(new ActionError(`${url}: the answer is larger than ${MAX_ANSWER_BYTES} bytes`));
          return;
        }
        chunks.push(chunk);
      });
      res.on("end", () =>
        resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString() }),
      );
      res.on("error", (error) =>
        reject(Object.assign(error, { received: true, status: res.statusCode, headers: res.headers })),
      );
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error("timed out"), { code: "ETIMEDOUT" })));
    req.on("error", (error) => reject(error instanceof ActionError ? error : Object.assign(error, { lost: true })));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** Seconds a Retry-After asks for (delta-seconds or an HTTP date); null when it names none. */
function retryAfter(headers) {
  const value = (headers["retry-after"] || "").trim();
  if (/^\d+$/.test(value)) return Number(value);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// --- The job's identity ----------------------------------------------------------------------

/** The job's OIDC token from its runner (ACTIONS_ID_TOKEN_REQUEST_URL), asked again when it is
 * about to expire: a GitHub job token lasts minutes, a job may wait longer for its cluster. */
class JobToken {
  constructor(audience) {
    this.audience = audience;
    this.token = "";
    this.expires = 0;
  }

  async get() {
    if (this.token && this.expires - Date.now() / 1000 > TOKEN_MARGIN_S) return this.token;
    const url = process.env.ACTIONS_ID_TOKEN_REQUEST_URL;
    const bearer = process.env.ACTIONS_ID_TOKEN_REQUEST_TOKEN;
    if (!url || !bearer) {
      throw new ActionError("this job may not ask for an OIDC token: give it `permissions: id-token: write`");
    }
    const target = new URL(url);
    target.searchParams.set("audience", this.audience);
    let answer;
    try {
      answer = await request("GET", target.href, {
        headers: { Authorization: `Bearer ${bearer}`, Accept: "application/json" },
      });
    } catch (error) {
      throw new ActionError(`the runner's token endpoint did not answer: ${error.message}`);
    }
    if (answer.status !== 200) {
      throw new ActionError(`the runner refused an OIDC token for audience ${this.audience}: HTTP ${answer.status}`);
    }
    let token;
    try {
      token = JSON.parse(answer.text).value;
    } catch {
      token = undefined;
    }
    if (typeof token !== "string" || token.split(".").length !== 3) {
      throw new ActionError("the runner's token endpoint answered without a token");
    }
    command("add-mask", token);
    this.token = token;
    this.expires = claims(token).exp || 0;
    return token;
  }
}

/** A JWT's claims, unverified: only to know when to ask for the next one. */
function claims(token) {
  try {
    return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
  } catch {
    return {};
  }
}

// --- lessor's API ----------------------------------------------------------------------------

class Api {
  constructor(endpoint, jobToken, ca) {
    this.endpoint = endpoint;
    this.jobToken = jobToken;
    this.ca = ca;
    this.waitedMs = 0; // of the retry budget, by all this step's requests
  }

  /** Whether the step may wait this much more; counted as spent when it may. */
  mayWait(ms) {
    if (this.waitedMs + ms > RETRY_BUDGET_MS) return false;
    this.waitedMs += ms;
    return true;
  }

  /** A request; { status, body } for any answer lessor gave, an ActionError otherwise. 429 and
   * 503 with Retry-After were refused before anything was done: sent again after the wait,
   * within the step's budget. A request with no answer is sent again only when it is a read. The
   * concurrency 429 names no time: final, as the spec says. */
  async call(method, path, body, { timeoutMs } = {}) {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (let tries = 1; ; tries += 1) {
      const headers = {
        Authorization: `Bearer ${await this.jobToken.get()}`,
        Accept: "application/json",
        "User-Agent": "lessor-github-action",
      };
      let answer;
      try {
        answer = await request(method, this.endpoint + path, { headers, body: payload, ca: this.ca, timeoutMs });
      } catch (error) {
        if (error instanceof ActionError) throw error;
        if (error.received && method === "POST" && error.headers.location) {
          // The create was received and its body lost: read what it made, never send it again.
          return this.call("GET", new URL(error.headers.location, this.endpoint).pathname);
        }
        const transient = ["ECONNRESET", "ETIMEDOUT", "EPIPE"].includes(error.code);
        if (!(method === "GET" && transient && tries <= 3 && this.mayWait(tries * 1000))) {
          throw new ActionError(`cannot reach ${this.endpoint}: ${error.code || error.message}`);
        }
        info(`lessor: ${error.code}; trying again in ${tries}s`);
        await sleep(tries * 1000);
        continue;
      }
      const wait = [429, 503].includes(answer.status) ? retryAfter(answer.headers) : null;
      const parsed = parse(this.endpoint + path, answer);
      if (wait === null || !this.mayWait(wait * 1000)) return { status: answer.status, body: parsed };
      info(`lessor: the server answered ${answer.status} (${(parsed && parsed.detail) || "busy"}); retrying in ${wait}s`);
      await sleep(wait * 1000);
    }
  }

  /** The body of a 2xx; an ActionError with lessor's one-line reason otherwise. */
  async ok(method, path, body, options) {
    const { status, body: answer } = await this.call(method, path, body, options);
    if (status >= 400) throw new ActionError(refusal(status, answer));
    return answer;
  }

  /** Release: done when it is accepted or the lease is already gone. */
  async release(id) {
    const { status, body } = await this.call("DELETE", `/v1/leases/${id}`);
    if (status < 300) return "released";
    if (status === 404) return "already gone";
    throw new ActionError(`releasing lease ${id}: ${refusal(status, body)}`);
  }
}

function parse(url, answer) {
  if (!answer.text) return null;
  const json = (answer.headers["content-type"] || "").includes("json");
  try {
    if (json) return JSON.parse(answer.text);
  } catch {
    // falls through: not lessor's answer
  }
  // An HTML page from a wrong URL or a proxy is never read as an API error.
  throw new ActionError(
    `${url} answered HTTP ${answer.status} with ${answer.headers["content-type"] || "no type"}, not lessor's JSON: is the endpoint right?`,
  );
}

function refusal(status, body) {
  const fields = body && typeof body === "object" ? body : {};
  const cause = fields.code || fields.reason;
  const line = fields.detail ? `${fields.error || `HTTP ${status}`}: ${fields.detail}` : fields.error || `HTTP ${status}`;
  return cause ? `${line} (${cause})` : line;
}

module.exports = {
  ActionError,
  Api,
  JobToken,
  command,
  durationMs,
  endpointUrl,
  exportVariable,
  info,
  input,
  leaseId,
  saveState,
  setOutput,
  sleep,
  state,
  step,
};
