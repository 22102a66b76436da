-- Argo CD health check for imagewatch.dev/PromotionPolicy (resource.customizations.health).
-- Lua 5.1 (Argo CD's gopher-lua).
--   spec.suspend, or Ready=False reason Suspended,
--   OutsideWindow or Frozen                       -> Suspended
--   no status yet, status older than the spec     -> Progressing
--   GatesPassing=False (a candidate waits for a
--   gate; Ready stays True meanwhile)             -> Progressing (the gate's message)
--   Ready=True                                    -> Healthy
--   Ready=False, any other reason                 -> Degraded ("<reason>: <message>")
--   otherwise                                     -> Progressing
local hs = {}

local function condition(status, name)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == name then
      return c
    end
  end
  return nil
end

-- The condition's message, else the failing gates from status.gates.
local function gate_message(status, c)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  local failing = {}
  if status.gates ~= nil then
    for _, g in ipairs(status.gates) do
      if g.passed ~= true then
        local text = g.name or "gate"
        if g.message ~= nil and g.message ~= "" then
          text = text .. ": " .. g.message
        end
        table.insert(failing, text)
      end
    end
  end
  if #failing > 0 then
    return table.concat(failing, "; ")
  end
  return c.reason or "Waiting for gates"
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

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "spec.suspend is true: nothing is proposed"
  return hs
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the first reconcile"
  return hs
end

-- A status written for an older spec says nothing about the current one.
local generation = obj.metadata and obj.metadata.generation
local observed = status.observedGeneration
if observed == nil then
  local ready = condition(status, "Ready")
  observed = ready and ready.observedGeneration
end
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "False" and (ready.reason == "Suspended" or ready.reason == "OutsideWindow" or ready.reason == "Frozen") then
  hs.status = "Suspended"
  hs.message = describe(ready)
  return hs
end

local gates = condition(status, "GatesPassing")
if gates ~= nil and gates.status == "False" then
  hs.status = "Progressing"
  hs.message = gate_message(status, gates)
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end

hs.status = "Progressing"
hs.message = "Waiting for the Ready condition"
return hs
