-- Circuit breaker: after a failure the daemon is skipped for `seconds`, then one probe is let through.
-- slurmctld serialises job_submit calls, so there is never more than one probe in flight.

local M = {}
local methods = {}
local mt = {__index = methods}

function M.new(seconds)
  return setmetatable({seconds = seconds, open_until = nil, failures = 0}, mt)
end

-- May the next call go to the daemon? While open: no, until the period ends; then one probe
-- is allowed and the breaker re-arms itself, so a probe that never reports cannot wedge it open.
function methods:allow(now)
  if self.open_until == nil then return true end
  if now < self.open_until then return false end
  self.open_until = now + self.seconds
  return true
end

function methods:success()
  self.open_until, self.failures = nil, 0
end

-- Returns true when this failure opened the breaker (for logging once per outage).
function methods:failure(now)
  local was_closed = self.open_until == nil
  self.failures = self.failures + 1
  self.open_until = now + self.seconds
  return was_closed
end

function methods:is_open()
  return self.open_until ~= nil
end

return M
