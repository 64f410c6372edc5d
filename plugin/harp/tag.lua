-- harp's tokens: the tag appended to admin_comment ("harp:<mode>,t!=60,t0=120,..."), the tokens a
-- user may not bring there, and the "harp:off" token a user puts in --comment to opt a job out.
-- A tag's flagged items ("t!=", "m!=", "c!=", "t~=") say what harp set; harp guard, `harp report`,
-- the accuracy metrics and `harp explain` read them.

local type, gsub, gmatch, sub, find, format = type, string.gsub, string.gmatch, string.sub, string.find,
  string.format
local concat = table.concat

local M = {}
M.MAX_ANNOTATION = 512
M.OPT_OUT = "harp:off"

-- A token holding "harp:" or "harp=" anywhere: harp guard reads squeue's lines, and the text after
-- a line break in admin_comment would be a line of its own there, a tag included.
local function is_harp_token(tok)
  return find(tok, "harp[:=]") ~= nil
end

-- Whether the user opted this job out with a "harp:off" token in --comment (tokens split on
-- whitespace). Found by a plain search, not by splitting the comment: slurmctld checks a comment's
-- length only after job_submit, and splitting a 4 MiB one took 124 ms inside its locks. Looked for
-- in the first MAX_COMMENT bytes only.
M.MAX_COMMENT = 65536
local OPT_OUT_END = #M.OPT_OUT
function M.opted_out(comment)
  if type(comment) ~= "string" then return false end
  if #comment > M.MAX_COMMENT then comment = sub(comment, 1, M.MAX_COMMENT) end
  local at = find(comment, M.OPT_OUT, 1, true)
  while at do
    if (at == 1 or find(comment, "^%s", at - 1)) and (at + OPT_OUT_END > #comment
        or find(comment, "^%s", at + OPT_OUT_END)) then
      return true
    end
    at = find(comment, M.OPT_OUT, at + 1, true)
  end
  return false
end

-- admin_comment without harp tokens and on one line (tokens joined by spaces), and what was done,
-- for the log; nil when it has neither. Slurm lets only its admins set admin_comment at submission;
-- they are not root, and another job_submit plugin may write there too.
function M.strip_forged(comment, submit_uid)
  if submit_uid == 0 or type(comment) ~= "string" then return nil end
  local broken = find(comment, "[\r\n]") ~= nil
  if not broken and not find(comment, "harp[:=]") then return nil end
  local kept, n, stripped = {}, 0, false
  for tok in gmatch(comment, "%S+") do
    if is_harp_token(tok) then stripped = true else n = n + 1; kept[n] = tok end
  end
  if stripped then return concat(kept, " "), "stripped user-supplied harp tokens" end
  if broken then return concat(kept, " "), "joined a multi-line admin_comment on one line" end
  return nil
end

-- A tag of the decision's own mode ("harp:<mode>,..."): the guard extends only jobs of its modes.
function M.valid(a, mode)
  return type(a) == "string" and #a <= M.MAX_ANNOTATION and type(mode) == "string"
    and sub(a, 1, 6 + #mode) == "harp:" .. mode .. "," and not find(a, "[%s%c]")
end

-- Whether the tag flags a target the decision does not change (a daemon's slip, never applied).
-- time, memory, cpus: whether the decision changes that target.
function M.unflagged(ann, time, memory, cpus)
  return (not time and find(ann, ",t[!~]=") or not memory and find(ann, ",m[!~]=")
    or not cpus and find(ann, ",c[!~]=")) and true or false
end

-- The tag with t0, the limit harp guard extends the job up to, the job's own as submitted (`limit`,
-- nil: none), whatever the daemon wrote: a wrong one would let the guard raise the job past the
-- user's request.
function M.own_limit(ann, limit)
  if not find(ann, ",t0=", 1, true) then return ann end
  return (gsub(ann, ",t0=%d*", limit and format(",t0=%d", limit) or ""))
end

-- The daemon's tag with each item of a target ("c!=3", "t~=60", "m=900") saying what the job got:
-- where a value was applied (time, memory in MB per node, cpus), the item holds it, flagged as it was
-- applied ("~" a time_min set, `t_flag`, else "!"); where nothing was changed, its flag is dropped and
-- the daemon's value kept as a prediction. got_t, got_m, got_c: a number or nil. Too long for
-- MAX_ANNOTATION (a value with more digits), the items whose value changed are left out: an item
-- missing is no claim, a wrong one is.
function M.applied_tag(ann, got_t, got_m, got_c, t_flag)
  local got = {t = got_t, m = got_m, c = got_c}
  local function item(drop)
    -- suffix: the item's "/q0.9" or "/k", kept with it and left out with it
    return function(key, flag, value, suffix)
      local v = got[key]
      if v == nil then return flag ~= "" and "," .. key .. "=" .. value .. suffix or nil end
      local applied, want = format("%.0f", v), key == "t" and t_flag or "!"
      if applied == value and flag == want then return nil end
      if drop then return "" end
      return "," .. key .. want .. "=" .. applied .. suffix
    end
  end
  local pattern = ",([tmc])([!~]?)=(%d+)([^,]*)"
  local out = gsub(ann, pattern, item(false))
  if #out > M.MAX_ANNOTATION then out = gsub(ann, pattern, item(true)) end
  return out
end

-- `comment` (admin_comment as it is now, forged tokens already stripped) with the tag appended as a
-- space-separated token; `comment` itself when there is no tag. Its control characters become
-- spaces: after a line break (root's comment keeps one), harp guard reads the tag as a line of its
-- own, which it cannot read, and the job stays at its cut limit.
function M.appended(comment, ann)
  if not ann then return comment end
  if type(comment) == "string" and find(comment, "%S") then return gsub(comment, "%c", " ") .. " " .. ann end
  return ann
end

return M
