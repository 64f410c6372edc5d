-- A tag as harp guard reads it: core/tag.py's parse_tag grammar, in Lua. The guard extends a job only
-- by a tag parse_tag reads, so the plugin cuts a limit in extend and time_min modes only under such a
-- tag (harp.apply). tests/unit/test_lua_plugin.py checks this against parse_tag on random and edge tags.
--
-- The grammar: "harp:<mode>" then ","-separated items, each one of
--   v=<anything but a comma>                    the model versions
--   <t|m|c><!|~|>=<digits>[/q<0-9.e->+][/k]      a value, flagged or not, its quantile, kept
--   <t|m|c>0=<digits>                            the user's own
-- with ASCII digits, 1 to 16 of them; the last item of a key counts, and its number is at most 2^53.
-- Anything else (an empty item, an unknown one, a suffix out of order) and parse_tag reads no tag.

local find, sub, byte, tonumber, type = string.find, string.sub, string.byte, tonumber, type

local M = {}

-- core.policy.Mode's values
local MODES = {off = true, shadow = true, time_min = true, extend = true, rewrite = true}
local MAX_DIGITS = 16
local COMMA = 44
-- MAX_TAG_VALUE, 2^53 = 9007199254740992, in its first 15 digits and its last: a double holds
-- 2^53 + 1 as 2^53, so 16 digits are not compared as one number.
local MAX_HEAD, MAX_LAST = 900719925474099, byte("2")

-- Whether a number read (nil: none) is within MAX_TAG_VALUE.
local function within(digits)
  if digits == nil or #digits < MAX_DIGITS then return true end
  local head = tonumber(sub(digits, 1, MAX_DIGITS - 1))
  return head < MAX_HEAD or head == MAX_HEAD and byte(digits, MAX_DIGITS) <= MAX_LAST
end

-- nil when parse_tag would read no tag in `token` (one token of admin_comment, no whitespace);
-- else true, then its time item's flag ("!", "~" or ""), number and t0's number (digit strings, nil
-- when the tag has none): what the guard extends a job by. Plain finds anchored at each item, no
-- table: this runs on every submission whose time it changes.
function M.read(token)
  if type(token) ~= "string" or sub(token, 1, 5) ~= "harp:" then return nil end
  local comma = find(token, ",", 6, true)
  if not MODES[sub(token, 6, (comma or 0) - 1)] then return nil end
  -- the last value of each key: a number past 2^53 overwritten by a later item is no fault
  local t_flag, t, m, c, t0, m0, c0
  -- "harp:mode," has no items; "harp:mode,x," has an empty one after x
  local pos = comma and comma < #token and comma + 1
  while pos do
    local stop
    if find(token, "^v=", pos) then
      stop = find(token, ",", pos, true) or #token + 1
    else
      local _, e, key, flag, digits = find(token, "^([tmc])([!~]?)=([0-9]+)", pos)
      if e then
        local _, q = find(token, "^/q[0-9.e%-]+", e + 1)
        e = q or e
        if find(token, "^/k", e + 1) then e = e + 2 end
        if key == "t" then t_flag, t = flag, digits elseif key == "m" then m = digits else c = digits end
      else
        _, e, key, digits = find(token, "^([tmc])0=([0-9]+)", pos)
        if not e then return nil end
        if key == "t" then t0 = digits elseif key == "m" then m0 = digits else c0 = digits end
      end
      if #digits > MAX_DIGITS then return nil end
      stop = e + 1
    end
    local after = byte(token, stop)
    if after ~= nil and after ~= COMMA then return nil end
    pos = after and stop + 1
  end
  if not (within(t) and within(m) and within(c) and within(t0) and within(m0) and within(c0)) then return nil end
  return true, t_flag, t, t0
end

return M
