-- PromotionPolicy objects as Argo CD hands them to the health script (JSON as Lua tables).
local function policy(generation, spec, status)
  local s = { from = { watchSelector = { matchLabels = { app = "my-api" } } },
              to = { path = "kubernetes/overlays/production" } }
  for k, v in pairs(spec or {}) do s[k] = v end
  return {
    apiVersion = "imagewatch.dev/v1alpha1",
    kind = "PromotionPolicy",
    metadata = { name = "my-api-production", namespace = "my-api", generation = generation },
    spec = s,
    status = status,
  }
end

local function conditions(list, extra)
  local s = { observedGeneration = 1, conditions = list }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

return {
  { name = "no-status", obj = policy(1, nil, nil) },
  { name = "suspended", obj = policy(1, { suspend = true },
      conditions({ { type = "Ready", status = "True", reason = "Promoted", message = "" } })) },
  { name = "suspended-without-status", obj = policy(1, { suspend = true }, nil) },
  { name = "not-suspended", obj = policy(1, { suspend = false },
      conditions({ { type = "Ready", status = "True", reason = "Promoted", message = "pull request #42 merged" } })) },
  { name = "stale-generation", obj = policy(2, nil,
      conditions({ { type = "Ready", status = "True", reason = "Promoted", message = "" } })) },
  { name = "ready", obj = policy(1, nil, conditions({
      { type = "Ready", status = "True", reason = "PullRequestOpen", message = "pull request #42 proposes my-api:v1.4.0" },
      { type = "GatesPassing", status = "True", reason = "AllGatesPass", message = "3/3" },
    })) },
  { name = "gates-failing", obj = policy(1, nil, conditions({
      { type = "Ready", status = "False", reason = "GatesFailing", message = "waiting for gates" },
      { type = "GatesPassing", status = "False", reason = "SoakNotDone", message = "soak: staging has run my-api:v1.4.0 for 12m of 30m" },
    })) },
  { name = "gates-failing-from-status", obj = policy(1, nil, conditions({
      { type = "GatesPassing", status = "False", reason = "GatesFailing" },
    }, { gates = {
      { name = "imageExists", passed = true, message = "3 images found" },
      { name = "application", passed = false, message = "my-api-stg is OutOfSync" },
      { name = "soak", passed = false },
    } })) },
  { name = "gated-while-ready", obj = policy(1, nil, conditions({
      { type = "Ready", status = "True", reason = "WaitingForGates", message = "my-api v1.3.0 -> v1.4.0 waits for gates" },
      { type = "GatesPassing", status = "False", reason = "AwaitingApproval", message = "approval: set imagewatch.dev/approve" },
    })) },
  { name = "nothing-to-promote", obj = policy(1, nil, conditions({
      { type = "Ready", status = "True", reason = "UpToDate", message = "kubernetes/overlays/production already holds my-api:v1.4.0" },
      { type = "GatesPassing", status = "Unknown", reason = "NothingToPromote", message = "" },
    })) },
  { name = "suspended-reason", obj = policy(1, nil, conditions({
      { type = "Ready", status = "False", reason = "Suspended", message = "suspended: my-api v1.4.0 would be proposed" },
    })) },
  { name = "degraded", obj = policy(1, nil, conditions({
      { type = "Ready", status = "False", reason = "ForgeError", message = "github: 401 Bad credentials" },
      { type = "GatesPassing", status = "True", reason = "AllGatesPass", message = "3/3" },
    })) },
  { name = "no-ready", obj = policy(1, nil, conditions({
      { type = "GatesPassing", status = "True", reason = "AllGatesPass", message = "" },
    })) },
}
