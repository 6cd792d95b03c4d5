"""The reconcilers of agent sandboxes: SandboxPools into agent-sandbox warm pools, SandboxLeases
into SandboxClaims, and SandboxExecutions run by the runner in the sandbox. Imported only with
`agentSandbox.mode: external` (lessor.operator.main)."""
