-- Argo CD health check for imagewatch.dev/ImageWatch (resource.customizations.health).
-- Reads the Ready condition the operator writes; Lua 5.1 (Argo CD's gopher-lua).
--   Ready=True                                   -> Healthy
--   Ready=False, reason Suspended, OutsideWindow
--   or Frozen (a change waits for a window)      -> Suspended
--   no status yet, status older than the spec,
--   Ready missing/Unknown, reason WaitingForGroup
--   or Progressing                               -> Progressing
--   Ready=False, any other reason                -> Degraded ("<reason>: <message>")
local hs = {}

local function ready_condition(status)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then
      return c
    end
  end
  return nil
end

-- "<reason>: <message>", the reason alone when the message is empty.
local function describe(c)
  local reason = c.reason or ""
  if c.message == nil or c.message == "" then
    return reason
  end
  if reason == "" then
    return c.message
  end
  return reason .. ": " .. c.message
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the first reconcile"
  return hs
end

local ready = ready_condition(status)

-- A status written for an older spec says nothing about the current one.
local generation = obj.metadata and obj.metadata.generation
local observed = status.observedGeneration
if observed == nil and ready ~= nil then
  observed = ready.observedGeneration
end
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

if ready.reason == "Suspended" or ready.reason == "OutsideWindow" or ready.reason == "Frozen" then
  hs.status = "Suspended"
elseif ready.reason == "WaitingForGroup" or ready.reason == "Progressing" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = describe(ready)
return hs
