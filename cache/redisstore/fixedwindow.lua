-- Fixed-window state of one logical key, all rules at once, in one atomic step, in one Redis
-- string (state.lua, magic "fw"). Mirrors fixedwindow.Counter: per counter, the count of one
-- aligned window [k·W, (k+1)·W) of Unix time and the latest instant seen (hw), which never
-- goes backwards. The count belongs to window k; once hw reaches (k+1)·W it is 0. Every instant
-- and window is in whole µs (below 2^53, so exact in a Lua number).
--
-- Plan (state.lua's K doubles): slack (µs), per slot W (µs), per rule its slot (1-based) and
-- effective limit.
-- Slot record (F = 3): hw, k (the window index the count belongs to), c (the count). The key's
-- TTL runs to the end of the latest window of its slots, plus slack; it is set when that moves.
-- Returns {corrupt, ...} (state.lua's code, then durations as whole µs then extra ns, always 0
-- here): record/release {}; reserve {allowed, wait µs, wait ns, at}; peek {wait µs, wait ns,
-- used...}; admit {allowed, wait µs, wait ns, at, then per rule used, reset µs, reset ns}.
-- Instants are the key's (TIME + offset).
-- Calls: TIME (unless the clock is overridden), GET, SET (KEEPTTL, or PX at a new window).
--
-- Clock steps (engine.Rebase, DESIGN §9). Every instant of a key (hw, window indexes, the at
-- of a release) is on the key's own timeline: Redis TIME (or the override) plus the key's clock
-- offset. When that instant is more than the step tolerance behind the latest instant the
-- slots have seen, the clock was stepped back: the offset is raised so that the key's instant
-- is that latest instant, and written with the key (refusals and peeks included). The count
-- stays in its window of that timeline, so a full window stays full for the rest of it on the
-- new clock. TTLs are durations, on Redis's clock.

local h, P, pre = arguments()
local op, n, at, STEP, NS, NR = h[1], h[2], h[4], h[5], h[6], h[7]
local raw = clock(h[3])
local S = P[1]
local W, RS, RL = {}, {}, {}
for j = 1, NS do W[j] = P[1 + j] end
local q = 1 + NS
for i = 1, NR do
  RS[i], RL[i] = P[q + 1], P[q + 2]
  q = q + 2
end

local F = 3
local L = load_key(pre, F)
-- sound figures (state.lua's sound_head): hw an instant, k an integer no later than it, c a
-- count; for the strategy's slots, a window index past the slot's time (its window would end
-- after hw + W) is unsound too
local stored, st, m, own = load_slots(L, pre, NS, F, raw, S, STEP, function(H, b, top)
  local hw, k, c = H[b], H[b + 1], H[b + 2]
  if hw % 1 == 0 and hw >= -LIM and hw <= top and k % 1 == 0 and k <= top and count(c) then
    return {hw = hw, k = k, c = c, existed = true}
  end
end, function() return {k = 0, c = 0} end, function(j, s)
  return not s.hw or s.k * W[j] <= math.max(s.hw, 0)
end)
local off = L.off
local now = raw
local bad = L.bad

-- floor(t / w), exact for integers below 2^53 (fmod is exact on doubles)
local function index(t, w)
  local r = math.fmod(t, w)
  if r < 0 then r = r + w end
  return (t - r) / w
end

-- Set the key's instant (now) from the offset, rebase the key when its clock stepped back (see
-- the top), and return the latest of now and every slot's time: the instant operations that
-- move the key's time are decided at.
local function settle()
  local hw
  now, off, hw = key_instant(raw, off, st, NS, STEP)
  if hw ~= nil and hw > now then return hw end
  return now
end

-- Move slot j's time to t if later; a window that has ended counts nothing.
local function advance(j, t)
  local s = st[j]
  if s.hw == nil or t > s.hw then s.hw = t end
  if s.c > 0 and s.hw >= (s.k + 1) * W[j] then s.c = 0 end
  return s.hw
end

-- count k attempts at t, in the window of the slot's time: an attempt dated in a window that
-- has ended there counts in the current one instead (never dropped, as fixedwindow.Counter.Add)
local function add(j, t, k)
  local s = st[j]
  local hw = advance(j, t)
  if s.c == 0 then s.k = index(hw, W[j]) end
  s.c = s.c + k
  s.existed = true
end

-- 0 when k more fit the slot's current window, else the time until it ends
local function wait(j, t, k, limit)
  local s = st[j]
  t = advance(j, t)
  if s.c + k <= limit then return 0 end
  return (s.k + 1) * W[j] - t
end

local function layered_wait(t, k)
  local d = 0
  for i = 1, NR do
    d = math.max(d, wait(RS[i], t, k, RL[i]))
  end
  return d
end

-- Write the key back: the slots stored (the strategy's updated, others' as they were), then
-- the strategy's new ones that were written to (with all set, every one that has a time).
local function save(all)
  local nums, ids = {off, 0, 0}, {}
  local need
  local same = L.ids == nil
  local function emit(s, id, w)
    local k = #nums
    nums[k + 1], nums[k + 2], nums[k + 3] = s.hw, s.k, s.c
    ids[#ids + 1] = id
    if w then
      local e = (index(s.hw, w) + 1) * w
      if need == nil or e > need then need = e end
    end
  end
  local function wanted(s)
    return s.hw ~= nil and (all or s.existed)
  end
  if same then
    for j = 1, NS do
      if wanted(st[j]) then emit(st[j], j, W[j]) else same = false end
    end
    if not same then
      own = own_ids(pre)
      for i = 1, #ids do ids[i] = own[ids[i]] end
    end
  else
    local mine = {}
    for j = 1, NS do
      if m[j] then mine[m[j]] = j end
    end
    for i = 1, L.n do
      local j = mine[i]
      if j then
        emit(st[j], L.ids[i], W[j])
      else
        emit(stored[i], L.ids[i], nil)
        if L.x and (need == nil or L.x - S > need) then need = L.x - S end
      end
    end
    for j = 1, NS do
      if not m[j] and wanted(st[j]) then emit(st[j], own[j], W[j]) end
    end
  end
  if need == nil then return write_key(L, nil) end
  local x, ttl = expiry(L, need, S, now, false)
  nums[2] = x
  write_key(L, encode(pre, same, ids, nums, ''), ttl)
end

if op == 1 then -- record
  settle()
  for j = 1, NS do add(j, now, n) end
  save(true)
  return {bad}
end

if op == 2 then -- reserve
  local t = settle()
  local d = layered_wait(t, n)
  if d > 0 then
    save(false)
    -- the wait is measured from the caller's instant (engine.StepTolerance)
    return {bad, 0, d + t - now, 0, t}
  end
  for j = 1, NS do add(j, t, n) end
  save(true)
  return {bad, 1, 0, 0, t}
end

if op == 3 then -- admit
  -- attempts count whether admitted or not
  local t = settle()
  local d = layered_wait(t, n)
  local allowed = d == 0 and 1 or 0
  for j = 1, NS do add(j, t, n) end
  -- a refused attempt counts too: the next one waits for every rule it filled
  if allowed == 0 then d = layered_wait(t, n) end
  local sk = t - now -- waits are measured from the caller's instant (engine.StepTolerance)
  local out = {bad, allowed, d > 0 and d + sk or 0, 0, t}
  for i = 1, NR do
    local j = RS[i]
    advance(j, t)
    local used = st[j].c
    local r = used > 0 and wait(j, t, RL[i], RL[i]) or 0
    out[#out + 1] = used
    out[#out + 1] = r > 0 and r + sk or 0
    out[#out + 1] = 0
  end
  save(true)
  return out
end

if op == 4 then -- peek
  local out = {bad, 0, 0}
  local t = settle()
  if n > 0 then
    out[2] = layered_wait(now, n)
    -- measured from the caller's instant (engine.StepTolerance)
    if out[2] > 0 then out[2] = out[2] + t - now end
  end
  for i = 1, NR do
    advance(RS[i], now)
    out[3 + i] = st[RS[i]].c
  end
  -- a slot with state keeps the time of the peek, as every operation does
  save(false)
  return out
end

if op == 5 then -- release
  settle()
  for j = 1, NS do
    local s = st[j]
    if s.existed then
      advance(j, s.hw)
      if s.c > 0 and index(at, W[j]) == s.k then s.c = s.c - math.min(n, s.c) end
    end
  end
  save(false)
  return {bad}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))
