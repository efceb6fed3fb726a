-- Rolling-window state of one logical key, all rules at once, in one atomic step.
-- Mirrors rollingwindow.Log: per counter, buckets of granularity G keep a count and their latest
-- instant; a bucket counts until latest + W; the counter's time (hw) never goes backwards.
--
-- KEYS: per slot j, KEYS[2j-1] a sorted set (member: bucket index, score: latest instant) and
--       KEYS[2j] a hash (field "b"..index: count; "total"; "hw").
-- ARGV: op ("record" | "reserve" | "peek" | "release"), n, now override in µs ("" for Redis
--       TIME), at (µs, for release), slot count, then per slot W, G, slack (µs), then rule
--       count, then per rule its slot (1-based) and effective limit.
-- Returns: record/release {now}; reserve {allowed, wait, at}; peek {wait, now, used...}. µs.

local op = ARGV[1]
local n = tonumber(ARGV[2])
local now
if ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nslots = tonumber(ARGV[5])
local W, G, S = {}, {}, {}
local p = 6
for j = 1, nslots do
  W[j], G[j], S[j] = tonumber(ARGV[p]), tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
  p = p + 3
end
local nrules = tonumber(ARGV[p])
p = p + 1
local RS, RL = {}, {}
for i = 1, nrules do
  RS[i], RL[i] = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  p = p + 2
end

local function zkey(j) return KEYS[2 * j - 1] end
local function hkey(j) return KEYS[2 * j] end

-- Exact integer division for instants below 2^53 (fmod is exact on doubles).
local function bucket(t, g)
  return string.format('%d', (t - math.fmod(t, g)) / g)
end

local function num(v)
  return tonumber(v) or 0
end

-- Redis arguments from Lua numbers go through "%.14g", which rounds µs instants: format them.
local function int(x)
  return string.format('%d', x)
end

-- drop the buckets whose latest instant + W is at or before t, a thousand at a time
local function prune(j, t)
  local z, h = zkey(j), hkey(j)
  local cut = t - W[j]
  while true do
    local dead = redis.call('ZRANGEBYSCORE', z, '-inf', int(cut), 'LIMIT', 0, 1000)
    if #dead == 0 then return end
    local fields = {}
    for i = 1, #dead do fields[i] = 'b' .. dead[i] end
    local counts = redis.call('HMGET', h, unpack(fields))
    local sum = 0
    for i = 1, #counts do sum = sum + num(counts[i]) end
    redis.call('HDEL', h, unpack(fields))
    redis.call('ZREM', z, unpack(dead))
    redis.call('HINCRBY', h, 'total', int(-sum))
  end
end

-- move the counter's time to t if later; return the counter's time
local function advance(j, t)
  local hw = tonumber(redis.call('HGET', hkey(j), 'hw'))
  if hw == nil or t > hw then
    redis.call('HSET', hkey(j), 'hw', int(t))
    prune(j, t)
    return t
  end
  return hw
end

local function add(j, t, k)
  if t + W[j] <= advance(j, t) then return end
  local m = bucket(t, G[j])
  redis.call('ZADD', zkey(j), 'GT', int(t), m)
  redis.call('HINCRBY', hkey(j), 'b' .. m, int(k))
  redis.call('HINCRBY', hkey(j), 'total', int(k))
end

local function used(j, t)
  advance(j, t)
  return num(redis.call('HGET', hkey(j), 'total'))
end

-- smallest d >= 0 with used(t+d) + k <= limit, measured from the counter's time
local function wait(j, t, k, limit)
  t = advance(j, t)
  local excess = num(redis.call('HGET', hkey(j), 'total')) + k - limit
  if excess <= 0 then return 0 end
  local freed, off = 0, 0
  while true do
    local items = redis.call('ZRANGE', zkey(j), off, off + 99, 'WITHSCORES')
    if #items == 0 then return W[j] end
    local fields = {}
    for i = 1, #items, 2 do fields[#fields + 1] = 'b' .. items[i] end
    local counts = redis.call('HMGET', hkey(j), unpack(fields))
    for i = 1, #counts do
      freed = freed + num(counts[i])
      if freed >= excess then return tonumber(items[2 * i]) + W[j] - t end
    end
    off = off + 100
  end
end

local function layered_wait(t, k)
  local d = 0
  for i = 1, nrules do
    d = math.max(d, wait(RS[i], t, k, RL[i]))
  end
  return d
end

-- every key this script may have written gets a TTL: the window past the counter's time, plus slack
local function expire()
  for j = 1, nslots do
    local hw = tonumber(redis.call('HGET', hkey(j), 'hw'))
    if hw ~= nil then
      local ms = math.ceil((math.max(hw, now) + W[j] - now + S[j]) / 1000)
      redis.call('PEXPIRE', zkey(j), int(ms))
      redis.call('PEXPIRE', hkey(j), int(ms))
    end
  end
end

if op == 'peek' then
  local out = {0, now}
  local exists = false
  for j = 1, nslots do
    if redis.call('EXISTS', hkey(j)) == 1 then exists = true end
  end
  if not exists then
    for i = 1, nrules do out[2 + i] = 0 end
    return out
  end
  if n > 0 then out[1] = layered_wait(now, n) end
  for i = 1, nrules do out[2 + i] = used(RS[i], now) end
  expire()
  return out
end

if op == 'record' then
  for j = 1, nslots do add(j, now, n) end
  expire()
  return {now}
end

if op == 'reserve' then
  local t = now
  for j = 1, nslots do
    local hw = tonumber(redis.call('HGET', hkey(j), 'hw'))
    if hw ~= nil and hw > t then t = hw end
  end
  local d = layered_wait(t, n)
  if d > 0 then
    expire()
    return {0, d, t}
  end
  for j = 1, nslots do add(j, t, n) end
  expire()
  return {1, 0, t}
end

if op == 'release' then
  local at = tonumber(ARGV[4])
  for j = 1, nslots do
    local f = 'b' .. bucket(at, G[j])
    local c = num(redis.call('HGET', hkey(j), f))
    local k = math.min(n, c)
    if k > 0 then
      redis.call('HINCRBY', hkey(j), f, int(-k))
      redis.call('HINCRBY', hkey(j), 'total', int(-k))
    end
  end
  expire()
  return {now}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))
