-- Runs an Argo CD health script against fixture objects, like Argo CD does: the object is the
-- global `obj`, the script returns `hs`. Usage: lua5.1 harness.lua SCRIPT FIXTURES
-- FIXTURES returns a list of {name = ..., obj = {...}}; prints "name|status|message" per case.
local script_path, fixtures_path = arg[1], arg[2]
local script = assert(loadfile(script_path))
local cases = assert(loadfile(fixtures_path))()

for _, case in ipairs(cases) do
  local env = { obj = case.obj }
  -- Only what Argo CD's Lua VM offers (base, table, string, math); any other global read or
  -- any global write is an error, so a script cannot depend on the harness.
  for _, name in ipairs({ "ipairs", "pairs", "tostring", "tonumber", "type", "next",
                          "select", "unpack", "error", "pcall", "assert",
                          "table", "string", "math" }) do
    env[name] = _G[name]
  end
  setmetatable(env, {
    __index = function(_, key) error("undefined global " .. tostring(key), 2) end,
    __newindex = function(_, key) error("global write " .. tostring(key), 2) end,
  })
  setfenv(script, env)
  local ok, hs = pcall(script)
  if not ok then
    io.write(case.name .. "|error|" .. tostring(hs) .. "\n")
  elseif type(hs) ~= "table" then
    io.write(case.name .. "|error|script returned " .. type(hs) .. "\n")
  else
    io.write(case.name .. "|" .. tostring(hs.status) .. "|" .. tostring(hs.message) .. "\n")
  end
end
