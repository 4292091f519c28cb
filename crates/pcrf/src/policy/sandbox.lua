-- Builds the environment operator scripts run in. Trusted code, run once per
-- VM before any script. Receives (budget_exceeded, log) from Rust and returns
-- (env, defs, seal): env is the script's _ENV, defs holds what the script's
-- top level defined, seal() makes every later global assignment an error.
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

return env, defs, seal
