-- Builds the environment operator scripts run in. Trusted code, run once per
-- VM before any script. Receives (budget_exceeded, log) from Rust and returns
-- (env, defs, seal, take_notes): env is the script's _ENV, defs holds what the
-- script's top level defined, seal() makes every later global assignment an
-- error, take_notes() hands over (and forgets) what notify() collected.
-- Written in the Lua 5.1/5.4 common subset so the LuaJIT benchmark build works.
local budget_exceeded, log = ...

local G = _G
local error, next, pcall, xpcall, rawget, rawset, setmetatable, getmetatable, tostring, type =
  error, next, pcall, xpcall, rawget, rawset, setmetatable, getmetatable, tostring, type

-- Tables no script may change, even with rawset. Weak keys: bookkeeping only.
local frozen = setmetatable({}, { __mode = "k" })

local function copy(src, drop)
  local out = {}
  for k, v in next, src do
    if not (drop and drop[k]) then
      out[k] = v
    end
  end
  return out
end

-- A read-only view of `src`; `src` itself is never reachable from the view.
local function readonly(src, name)
  local proxy = {}
  local function step(_, k)
    return next(src, k)
  end
  setmetatable(proxy, {
    __index = src,
    __newindex = function(_, k)
      error("attempt to modify read-only library '" .. name .. "' (field '" .. tostring(k) .. "')", 2)
    end,
    __pairs = function()
      return step, proxy, nil
    end,
    __len = function()
      return #src
    end,
    __metatable = "locked",
  })
  frozen[proxy] = true
  return proxy
end

-- string.dump is also reachable through ("").dump: remove it at the source,
-- and lock the shared string metatable so scripts cannot reach or change it.
G.string.dump = nil
getmetatable("").__metatable = "locked"

-- C functions whose work one call can make unbounded. The instruction hook
-- only runs between VM instructions, never inside a C function, so each is
-- replaced (in the real string/table libraries, which ("").find reaches too)
-- by a guard that refuses a call whose worst case is too large. What is left
-- is bounded per call by the memory limit, and repeated calls by the
-- instruction budget and the time limit.
local MAX_STEPS = 2e7
local floor, huge = math.floor, math.huge
local s_byte, s_find, s_match, s_gmatch, s_gsub, s_rep =
  G.string.byte, G.string.find, G.string.match, G.string.gmatch, G.string.gsub, G.string.rep
local t_move = G.table.move

local function len(v)
  local t = type(v)
  if t == "string" then
    return #v
  elseif t == "number" then
    return #tostring(v)
  end
  return 0 -- the C function raises its own error for anything else
end

-- Index just past the set starting at p[i] == "[" (Lua's classEnd).
local function set_end(p, i, m)
  i = i + 1
  if s_byte(p, i) == 94 then -- ^
    i = i + 1
  end
  repeat
    local c = s_byte(p, i)
    i = i + 1
    if c == 37 then -- %
      i = i + 1
    end
  until i > m or s_byte(p, i) == 93 -- ]
  return i + 1
end

-- An upper bound on the matcher's steps for pattern p on a subject of n
-- bytes: each of the q repetitions (* + - ?) takes a run of the subject,
-- so one attempt explores at most (q+1) * C(n+q, q) states, each costing
-- the pattern's length plus n per back-reference or %b; unanchored, there
-- are n+1 attempts. Patterns without specials are a plain search: n * m.
local function match_cost(n, p, plain)
  local m = len(p)
  if type(p) ~= "string" then
    return (n + 1) * (m + 1)
  end
  if plain or not s_find(p, "[%^%$%*%+%?%.%(%)%[%]%%%-]") then
    return (n + 1) * (m + 1)
  end
  local i, q, scans, starts = 1, 0, 0, n + 1
  if s_byte(p, 1) == 94 then -- ^
    starts, i = 1, 2
  end
  while i <= m do
    local c = s_byte(p, i)
    local single = true
    if c == 37 then -- %
      local d = s_byte(p, i + 1)
      if d == 98 then -- %bxy
        scans, i, single = scans + 1, i + 4, false
      elseif d == 102 then -- %f[set]
        i, single = set_end(p, i + 2, m), false
      elseif d and d >= 48 and d <= 57 then -- %0-%9
        scans, i, single = scans + 1, i + 2, false
      else
        i = i + 2
      end
    elseif c == 40 or c == 41 then -- ( )
      i, single = i + 1, false
    elseif c == 91 then -- [
      i = set_end(p, i, m)
    else
      i = i + 1
    end
    if single then
      local r = s_byte(p, i)
      if r == 42 or r == 43 or r == 45 or r == 63 then -- * + - ?
        q, i = q + 1, i + 1
      end
    end
  end
  local states = q + 1
  for j = 1, q do
    states = states * (n + j) / j
    if states > MAX_STEPS then
      return huge
    end
  end
  return starts * states * (m + 1 + scans * (n + 1))
end

local function check(what, s, p, plain)
  local n = len(s)
  local cost = match_cost(n, p, plain)
  if cost > MAX_STEPS then
    error(what .. ": pattern too complex for a subject of " .. n .. " bytes (worst case about "
      .. (cost == huge and "infinite" or floor(cost)) .. " steps, limit " .. floor(MAX_STEPS)
      .. "); anchor it with ^, use fewer repetitions or a shorter subject", 3)
  end
end

-- Errors of the real function name the script's line, not the guard's.
local function relay(ok, ...)
  if ok then
    return ...
  end
  local e = ...
  if type(e) ~= "string" then
    error(e, 0)
  end
  e = s_match(e, "^sandbox:%d+: (.*)$") or e
  if s_find(e, "^[^\n]-:%d+: ") then
    error(e, 0) -- already says where (e.g. an error in a gsub callback)
  end
  error(e, 2) -- relay is tail-called: level 2 is the script
end

G.string.find = function(s, p, init, plain)
  check("string.find", s, p, plain)
  return relay(pcall(s_find, s, p, init, plain))
end
G.string.match = function(s, p, init)
  check("string.match", s, p)
  return relay(pcall(s_match, s, p, init))
end
G.string.gmatch = function(s, p, init)
  check("string.gmatch", s, p)
  return relay(pcall(s_gmatch, s, p, init))
end
G.string.gsub = function(s, p, repl, n)
  check("string.gsub", s, p)
  return relay(pcall(s_gsub, s, p, repl, n))
end
-- An empty string repeated n times loops n times in C without allocating.
G.string.rep = function(s, n, sep)
  if type(n) == "number" and n > 1 and n == floor(n) and len(s) + len(sep) == 0 then
    n = 1
  end
  return relay(pcall(s_rep, s, n, sep))
end
-- Moving nils over a huge range loops in C without allocating.
local MAX_MOVE = 1e7
if t_move then -- Lua 5.3+
  G.table.move = function(a1, f, e, t, a2)
    if type(f) == "number" and type(e) == "number" and e - f >= MAX_MOVE then
      error("table.move of " .. floor(e - f + 1) .. " elements refused (limit " .. floor(MAX_MOVE) .. ")", 2)
    end
    return relay(pcall(t_move, a1, f, e, t, a2))
  end
end

-- A budget error must end the call: pcall/xpcall may not swallow it.
local function rethrow_if_exhausted(...)
  local over = budget_exceeded()
  if over then
    error(over, 0)
  end
  return ...
end

local function safe_pcall(f, ...)
  return rethrow_if_exhausted(pcall(f, ...))
end

local function safe_xpcall(f, handler, ...)
  return rethrow_if_exhausted(xpcall(f, handler, ...))
end

local function safe_rawset(t, k, v)
  if frozen[t] then
    error("attempt to modify a read-only table with rawset", 2)
  end
  return rawset(t, k, v)
end

-- __gc would run script code outside any call; __mode makes results depend
-- on garbage collection timing. Both would break isolation or the memo.
local function safe_setmetatable(t, mt)
  if type(mt) == "table" and (rawget(mt, "__gc") ~= nil or rawget(mt, "__mode") ~= nil) then
    error("__gc and __mode metamethods are not allowed in policies", 2)
  end
  return setmetatable(t, mt)
end

local libs = {
  assert = assert,
  error = error,
  getmetatable = getmetatable,
  ipairs = ipairs,
  next = next,
  pairs = pairs,
  pcall = safe_pcall,
  rawequal = rawequal,
  rawget = rawget,
  rawlen = rawlen,
  rawset = safe_rawset,
  select = select,
  setmetatable = safe_setmetatable,
  tonumber = tonumber,
  tostring = tostring,
  type = type,
  xpcall = safe_xpcall,
  _VERSION = _VERSION,
  log = log,
  string = readonly(copy(G.string), "string"),
  table = readonly(copy(G.table), "table"),
  -- No random numbers: a decision must follow from its input alone.
  math = readonly(copy(G.math, { random = true, randomseed = true }), "math"),
}
if G.utf8 then
  libs.utf8 = readonly(copy(G.utf8), "utf8")
end

-- notify(name, payload): asks for a notification to external systems with
-- this decision (see docs/notifications.md). Collected here, taken by Rust
-- after the call; a call that fails emits none.
local MAX_NOTES = 16
local notes = {}
libs.notify = function(name, payload)
  if type(name) ~= "string" then
    error("notify: the name must be a string", 2)
  end
  if payload ~= nil and type(payload) ~= "table" then
    error("notify: the payload must be a table (or nil)", 2)
  end
  if #notes >= MAX_NOTES then
    error("notify: more than " .. MAX_NOTES .. " notifications in one decision", 2)
  end
  notes[#notes + 1] = { name = name, payload = payload }
end
local function take_notes()
  local taken = notes
  notes = {}
  return taken
end

-- The built-in Rx media authorisation (TS 29.213 section 6.3), used when the
-- policy defines no authorize_media(input). Copy it into a policy to change
-- it. One dynamic PCC rule per Media-Sub-Component:
--   Flow-Usage AF_SIGNALLING  -> QCI 5, non-GBR (IMS signalling)
--   Media-Type AUDIO          -> QCI 1, GBR = MBR = Max-Requested-Bandwidth
--   Media-Type VIDEO          -> QCI 2, GBR = MBR = Max-Requested-Bandwidth
--   anything else             -> QCI 8, non-GBR, MBR = Max-Requested-Bandwidth
-- The sub-component's bandwidths override the component's. Rule names are
-- "af-<tag>-<component>-<flow>": the tag (8 hex digits) is derived from the
-- Rx Session-Id, so names are short and distinct per AF session. Return
-- { rules = {...} } or { reject = "reason" } (answered 5063).
local AUDIO_QCI, VIDEO_QCI, SIGNALLING_QCI, OTHER_QCI = 1, 2, 5, 8
local AF_SIGNALLING, FLOW_REMOVED, FLOW_ENABLED = 2, 4, 2
libs.default_authorize_media = function(input)
  local rules = {}
  for _, mc in ipairs(input.media or {}) do
    for _, sc in ipairs(mc.sub_components or {}) do
      local status = sc.flow_status or mc.flow_status or FLOW_ENABLED
      if status ~= FLOW_REMOVED and #(sc.flows or {}) > 0 then
        local ul = sc.max_ul or mc.max_ul
        local dl = sc.max_dl or mc.max_dl
        local qos
        if sc.flow_usage == AF_SIGNALLING then
          qos = { qci = SIGNALLING_QCI, arp = { priority = 1, may_preempt = true, preemptable = false } }
        elseif mc.media_type == "AUDIO" or mc.media_type == "VIDEO" then
          qos = {
            qci = mc.media_type == "AUDIO" and AUDIO_QCI or VIDEO_QCI,
            arp = { priority = 2, may_preempt = true, preemptable = false },
            mbr_ul = ul, mbr_dl = dl, gbr_ul = ul, gbr_dl = dl,
          }
        else
          qos = { qci = OTHER_QCI, arp = { priority = 8, may_preempt = false, preemptable = true }, mbr_ul = ul, mbr_dl = dl }
        end
        rules[#rules + 1] = {
          name = "af-" .. input.af.tag .. "-" .. mc.number .. "-" .. sc.flow_number,
          flows = sc.flows,
          flow_status = status,
          qos = qos,
          precedence = 50,
        }
      end
    end
  end
  return { rules = rules }
end

local defs = setmetatable({}, { __index = libs, __metatable = "locked" })
local sealed = false
local env = {}
setmetatable(env, {
  __index = defs,
  __newindex = function(_, k, v)
    if sealed then
      error("assignment to global '" .. tostring(k) .. "': globals are read-only once the policy is loaded (use local)", 2)
    end
    rawset(defs, k, v)
  end,
  __metatable = "locked",
})
frozen[env] = true
libs._G = env

-- Nothing else in this VM needs the loaders; drop them from the real globals too.
for _, name in next, { "dofile", "loadfile", "load", "loadstring", "require", "collectgarbage", "print", "module", "setfenv", "getfenv", "newproxy", "io", "os", "package", "debug", "coroutine" } do
  G[name] = nil
end

local function seal()
  sealed = true
end

return env, defs, seal, take_notes
