-- Argo CD health check for serving.kvrouter.dev/KVRouter (argocd-cm key
-- resource.customizations.health.serving.kvrouter.dev_KVRouter). docs/gitops.md explains each
-- outcome; test/argocd runs this file against config/argocd/health_test.yaml.
--
-- Argo CD runs custom checks without Lua's string, math and io libraries (only base, table and a
-- reduced os are opened), so this script builds messages with `..` and tostring only.

local generation = obj.metadata.generation

-- Reasons of Ready=False that no amount of waiting fixes: someone has to act.
local stuckReasons = {ApplyFailed = true, InvalidSpec = true, CRDNotInstalled = true}

-- Conditions the router's status poller sets. They describe performance, not whether the KVRouter
-- serves, so they never change the outcome; a True one (False for RouterStatusAvailable) is named
-- in the message.
local advisories = {
  {type = "CacheThrashing", bad = "True"},
  {type = "EventsDegraded", bad = "True"},
  {type = "TokenizerDegraded", bad = "True"},
  {type = "EngineConfigMismatch", bad = "True"},
  {type = "TokenizerMismatch", bad = "True"},
  {type = "RouterStatusAvailable", bad = "False"},
}

local function find(conditions, t)
  for _, c in ipairs(conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function describe(c)
  local text = tostring(c.reason)
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local function result(status, message)
  return {status = status, message = message}
end

local function check()
  if obj.metadata.deletionTimestamp ~= nil then
    local finalizers = obj.metadata.finalizers
    if finalizers ~= nil and #finalizers > 0 then
      return result("Progressing", "Deleting; waiting for finalizers: " .. table.concat(finalizers, ", "))
    end
    return result("Progressing", "Deleting")
  end

  local status = obj.status
  if status == nil or status.conditions == nil or #status.conditions == 0 then
    return result("Progressing", "Waiting for the kvrouter operator to report status")
  end
  local conditions = status.conditions

  local ready = find(conditions, "Ready")
  if ready == nil then
    return result("Progressing", "Waiting for the Ready condition")
  end
  if ready.observedGeneration ~= generation then
    return result("Progressing", "Waiting for the operator to observe generation " .. tostring(generation) ..
      " (Ready describes generation " .. tostring(ready.observedGeneration) .. ")")
  end

  -- A failed apply is retried with backoff and leaves status.observedGeneration at the last
  -- generation that applied cleanly, while the conditions already describe this one: trust them.
  local degraded = find(conditions, "Degraded")
  if degraded ~= nil and degraded.status == "True" and degraded.observedGeneration == generation then
    return result("Degraded", describe(degraded))
  end
  if ready.status == "False" and stuckReasons[ready.reason] then
    return result("Degraded", describe(ready))
  end

  if status.observedGeneration ~= generation then
    return result("Progressing", "Waiting for the operator to finish reconciling generation " .. tostring(generation))
  end
  if ready.reason == "Stopped" then
    return result("Suspended", describe(ready))
  end
  if ready.status ~= "True" then
    return result("Progressing", describe(ready))
  end

  local progressing = find(conditions, "Progressing")
  if progressing ~= nil and progressing.status == "True" and progressing.observedGeneration == generation then
    return result("Progressing", "Serving while rolling out: " .. describe(progressing))
  end

  -- InferencePool mode: the engines and the router serve, but clients reach them through the
  -- Gateway only once it has accepted the pool and resolved its endpoint picker. A refusal needs
  -- someone to act on the Gateway (its inference support, the picker's Service); no report yet
  -- is a wait. (A missing InferencePool CRD is already Degraded above.)
  local pool = find(conditions, "InferencePoolReady")
  if pool ~= nil and pool.observedGeneration == generation then
    if pool.status == "False" and (pool.reason == "NotAccepted" or pool.reason == "RefsNotResolved") then
      return result("Degraded", "InferencePoolReady: " .. describe(pool))
    end
    if pool.status == "Unknown" and pool.reason == "Pending" then
      return result("Progressing", "Serving, waiting for the Gateway: " .. describe(pool))
    end
  end

  local notes = {}
  for _, a in ipairs(advisories) do
    local c = find(conditions, a.type)
    if c ~= nil and c.status == a.bad then
      table.insert(notes, a.type .. " (" .. describe(c) .. ")")
    end
  end
  if #notes > 0 then
    return result("Healthy", describe(ready) .. "; " .. table.concat(notes, "; "))
  end
  return result("Healthy", describe(ready))
end

return check()
