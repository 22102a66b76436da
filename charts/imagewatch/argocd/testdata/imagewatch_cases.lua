-- ImageWatch objects as Argo CD hands them to the health script (JSON as Lua tables).
local function watch(generation, status)
  return {
    apiVersion = "imagewatch.dev/v1alpha1",
    kind = "ImageWatch",
    metadata = { name = "my-api-canary", namespace = "my-api", generation = generation },
    spec = { image = "registry.example.com/my-api" },
    status = status,
  }
end

local function ready(status, reason, message, extra)
  local s = {
    observedGeneration = 2,
    conditions = {
      { type = "Ready", status = status, reason = reason, message = message,
        observedGeneration = 2, lastTransitionTime = "2026-01-01T00:00:00Z" },
    },
  }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

return {
  { name = "no-status", obj = watch(1, nil) },
  { name = "stale-generation", obj = watch(3, ready("True", "UpToDate", "apps/x holds v1")) },
  { name = "no-observed-generation",
    obj = watch(1, { conditions = { { type = "Ready", status = "True", reason = "UpToDate", message = "" } } }) },
  { name = "condition-observed-generation",
    obj = watch(2, { conditions = { { type = "Ready", status = "True", reason = "UpToDate", message = "", observedGeneration = 2 } } }) },
  { name = "no-conditions", obj = watch(2, { observedGeneration = 2 }) },
  { name = "ready-unknown", obj = watch(2, ready("Unknown", "Progressing", "")) },
  { name = "up-to-date", obj = watch(2, ready("True", "UpToDate", "apps/my-api/overlays/stg/deployment-canary.yaml holds registry.example.com/my-api:canary-v1.2.4",
      { latest = { tag = "canary-v1.2.4" }, applied = { tag = "canary-v1.2.4", commit = "1a2b3c4" } })) },
  { name = "updated", obj = watch(2, ready("True", "Updated", "deployment-canary.yaml: canary-v1.2.3 -> canary-v1.2.4 (commit 1a2b3c4)")) },
  { name = "suspended", obj = watch(2, ready("False", "Suspended", "suspended: nothing is written")) },
  { name = "waiting-for-group", obj = watch(2, ready("False", "WaitingForGroup", "my-api-worker has no v1.4.0 yet")) },
  { name = "progressing", obj = watch(2, ready("False", "Progressing", "seen, not reconciled yet")) },
  { name = "registry-error", obj = watch(2, ready("False", "RegistryError", "registry.example.com: 503 Service Unavailable")) },
  { name = "credentials-not-found", obj = watch(2, ready("False", "CredentialsNotFound", "registry Secret my-api/regcred not found")) },
  { name = "no-message", obj = watch(2, ready("False", "GitError", nil)) },
  { name = "other-condition-first", obj = watch(2, {
      observedGeneration = 2,
      conditions = {
        { type = "Reconciling", status = "True", reason = "Scanning", message = "" },
        { type = "Ready", status = "False", reason = "TargetNotFound", message = "no Deployment my-api-canary under apps/my-api" },
      } }) },
}
