// The action's post step, run when the job ends however it ended (`post-if: always()`): release
// the lease main saved and remove its kubeconfig. A lease already gone (released on a cancel,
// expired) is not an error; a release that fails is, so a cluster left held is seen.
"use strict";

const fs = require("node:fs");
const lessor = require("./lessor.js");

lessor.step(async () => {
  const id = lessor.state("lease_id");
  const file = lessor.state("kubeconfig");
  if (file) fs.rmSync(file, { force: true });
  if (!id) {
    lessor.info("no lease was taken");
    return;
  }
  const endpoint = lessor.endpointUrl(lessor.input("endpoint", { required: true }));
  const token = new lessor.JobToken(lessor.input("audience") || "lessor");
  const api = new lessor.Api(endpoint, token, lessor.input("ca-certificate"));
  lessor.info(`lease ${id}: ${await api.release(id)}`);
});
