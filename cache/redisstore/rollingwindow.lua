-- Rolling-window state of one logical key, all rules at once, in one atomic step, in one Redis
-- string (state.lua, magic "rw"). Mirrors rollingwindow.Log: per counter, buckets of
-- granularity G keep a count and their latest instant; a bucket counts until latest + W; the
-- counter's time (hw) never goes backwards.
--
-- Plan (state.lua's K doubles): slack (µs), per slot W and G (µs), per rule its slot (1-based)
-- and effective limit; for sync, then the report count and per report its slot, remaining,
-- used and reset (µs, 0 when unknown). n is the pause (µs) for sync.
-- Slot record (F = 5): hw, total (the buckets' counts), nb (buckets), rr and ra (the remaining
-- count the upstream last reported and when; rr -1 when none); the variable part is, per slot
-- in order, nb buckets of two doubles: latest instant, count, oldest first (bucket index =
-- floor(latest / G), so by index too).
-- Returns {corrupt, ...}: corrupt is state.lua's code (0: the key was usable or absent), then
--   record/release/sync {}; reserve {allowed, wait, at}; peek {wait, now, used..., paused
--   until (0 when not paused), then per rule reported remaining and its instant (-1 and 0
--   when none)}; admit {allowed, wait, 0, at, then per rule used, reset, 0} (the zeros are the
--   ns parts of the durations, as the other scripts return them). µs.
-- Calls: TIME (unless the clock is overridden), GET, and SET (KEEPTTL, or PX when the TTL
-- falls short) when the value changed. Only the buckets at the edges are decoded: the oldest
-- (pruning, waits), the newest (records, resets), and one struct.pack re-encodes the header.
--
-- Clock steps (strategy.Rebase, DESIGN §9). Every instant of a key (hw, bucket instants, the
-- pause, ra, x, the at of a release) is on the key's own timeline: Redis TIME (or the
-- override) plus the key's clock offset. When that instant is more than the step tolerance
-- behind the latest instant the key's slots have seen, the clock was stepped back: the offset
-- is raised so that the key's instant is that latest instant and written with the key
-- (refusals and peeks included). The buckets are not rewritten; nothing that counts moves, and
-- every wait told holds on the new clock. TTLs are durations, so on Redis's own clock.

local h, P, pre = arguments()
local op, n, at, STEP, NS, NR = h[1], h[2], h[4], h[5], h[6], h[7]
local raw = clock(h[3])
local S = P[1]
local W, G, RS, RL = {}, {}, {}, {}
for j = 1, NS do W[j], G[j] = P[2 * j], P[2 * j + 1] end
local q = 1 + 2 * NS
for i = 1, NR do
  RS[i], RL[i] = P[q + 1], P[q + 2]
  q = q + 2
end

local L = load_key(pre, 5)
local stored = {}
if L.v then
  local ns = L.n
  if ns < 0 then ns = NS end
  if not load_numbers(L, ns, 5) then
    unreadable(L)
  else
    local H, pos, v = L.H, L.pos, L.v
    for i = 1, ns do
      local b = 5 * i - 1
      local nb = H[b + 2]
      if nb < 0 or nb ~= math.floor(nb) or pos + 16 * nb > #v + 1 then
        pos = -1
        break
      end
      stored[i] = {hw = H[b], total = H[b + 1], nb = nb, rr = H[b + 3], ra = H[b + 4], arr = sub(v, pos, pos + 16 * nb - 1)}
      pos = pos + 16 * nb
    end
    if pos ~= #v + 1 then
      unreadable(L)
      stored = {}
    end
  end
end
local m, own = slot_map(L, pre, NS)
local st = {}
for j = 1, NS do
  st[j] = m[j] and stored[m[j]] or {total = 0, nb = 0, rr = -1, ra = 0, arr = ''}
end
local off, pu = L.off, L.pu
local now = raw
local bad = L.bad

-- Exact integer division for instants below 2^53 (fmod is exact on doubles).
local function bidx(t, g)
  return (t - math.fmod(t, g)) / g
end

-- bucket i (1-based) of slot s: latest instant, count
local function bk(s, i)
  return unpackd('<dd', s.arr, 16 * i - 15)
end

-- replace bucket i of slot s
local function put(s, i, latest, count)
  s.arr = sub(s.arr, 1, 16 * i - 16) .. packd('<dd', latest, count) .. sub(s.arr, 16 * i + 1)
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

-- Move slot j's time to t if later and drop the buckets that stop counting there.
local function advance(j, t)
  local s = st[j]
  if s.hw == nil or t > s.hw then
    s.hw = t
    local w, i = W[j], 0
    while i < s.nb do
      local l, c = bk(s, i + 1)
      if l + w > t then break end
      s.total = s.total - c
      i = i + 1
    end
    if i > 0 then
      s.arr = sub(s.arr, 16 * i + 1)
      s.nb = s.nb - i
    end
  end
  return s.hw
end

-- record k at t; a record dated so early it would no longer count at the slot's time counts
-- at that time instead (never dropped, as rollingwindow.Log.Add)
local function add(j, t, k)
  local s = st[j]
  local hw = advance(j, t)
  if t + W[j] <= hw then t = hw end
  local g = G[j]
  local b = bidx(t, g)
  s.total = s.total + k
  -- walk back from the newest bucket: in-order writes stop at the first step
  local i = s.nb
  while i >= 1 do
    local l, c = bk(s, i)
    local lb = bidx(l, g)
    if lb == b then
      if i == s.nb then
        s.arr = sub(s.arr, 1, 16 * i - 16) .. packd('<dd', math.max(l, t), c + k)
      else
        put(s, i, math.max(l, t), c + k)
      end
      return
    end
    if lb < b then break end
    i = i - 1
  end
  if i == s.nb then
    s.arr = s.arr .. packd('<dd', t, k)
  else
    s.arr = sub(s.arr, 1, 16 * i) .. packd('<dd', t, k) .. sub(s.arr, 16 * i + 1)
  end
  s.nb = s.nb + 1
end

-- smallest d >= 0 with used(t+d) + k <= limit, measured from the slot's time
local function wait(j, t, k, limit)
  local s = st[j]
  t = advance(j, t)
  local excess = s.total + k - limit
  if excess <= 0 then return 0 end
  local freed = 0
  for i = 1, s.nb do
    local l, c = bk(s, i)
    freed = freed + c
    if freed >= excess then return l + W[j] - t end
  end
  return W[j]
end

local function layered_wait(t, k)
  local d = 0
  for i = 1, NR do
    d = math.max(d, wait(RS[i], t, k, RL[i]))
  end
  return d
end

-- time from t until slot j counts nothing: its newest bucket that holds a count leaving the
-- window (rollingwindow.Log.WaitTime(t, limit, limit))
local function reset(j, t)
  local s = st[j]
  for i = s.nb, 1, -1 do
    local l, c = bk(s, i)
    if c > 0 then return l + W[j] - t end
  end
  return W[j]
end

-- Write the key back: the slots stored (the strategy's updated, others' as they were), then
-- the strategy's new ones. Its TTL is refreshed when it would end before the newest request
-- of a slot stops counting or the pause ends, to that instant plus slack.
local function save()
  if pu <= now then pu = 0 end
  local nums, arrs, ids = {off, 0, pu}, {}, {}
  local need = pu > 0 and pu or nil
  local same = L.ids == nil
  local function emit(s, id, w)
    local k = #nums
    nums[k + 1], nums[k + 2], nums[k + 3], nums[k + 4], nums[k + 5] = s.hw, s.total, s.nb, s.rr, s.ra
    arrs[#arrs + 1] = s.arr
    ids[#ids + 1] = id
    if w then
      local e = s.hw + w
      if need == nil or e > need then need = e end
    end
  end
  if same then
    for j = 1, NS do
      if st[j].hw ~= nil then emit(st[j], j, W[j]) else same = false end
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
        -- another strategy's slot: keep the expiry it was given, less its slack
        if L.x and (need == nil or L.x - S > need) then need = L.x - S end
      end
    end
    for j = 1, NS do
      if not m[j] and st[j].hw ~= nil then emit(st[j], own[j], W[j]) end
    end
  end
  if need == nil then return write_key(L, nil) end
  local x, ttl = expiry(L, need, S, now, false)
  nums[2] = x
  write_key(L, encode(pre, same, ids, nums, table.concat(arrs)), ttl)
end

if op == 1 then -- record
  settle()
  for j = 1, NS do add(j, now, n) end
  save()
  return {bad}
end

if op == 2 then -- reserve
  local t = settle()
  local d = layered_wait(t, n)
  if pu > t then d = math.max(d, pu - t) end
  if d == 0 then
    for j = 1, NS do add(j, t, n) end
  end
  save()
  -- the wait is measured from the caller's instant (strategy.StepTolerance)
  if d > 0 then return {bad, 0, d + t - now, t} end
  return {bad, 1, 0, t}
end

if op == 3 then -- admit
  -- strategy.Strategy.Admit: Reserve's decision (a pause does not hold a server's admissions),
  -- then every rule's used count and reset at the decision's instant
  local t = settle()
  local sk = t - now -- waits are measured from the caller's instant (strategy.StepTolerance)
  local d = layered_wait(t, n)
  if d == 0 then
    for j = 1, NS do add(j, t, n) end
  end
  local out = {bad, d == 0 and 1 or 0, d > 0 and d + sk or 0, 0, t}
  for i = 1, NR do advance(RS[i], t) end
  save()
  for i = 1, NR do
    local used = st[RS[i]].total
    local r = used > 0 and reset(RS[i], t) or 0
    out[#out + 1] = used
    out[#out + 1] = r > 0 and r + sk or 0
    out[#out + 1] = 0
  end
  return out
end

if op == 4 then -- peek
  -- A key with state keeps the time of the peek, as every operation does: were Redis TIME to
  -- step back, usage that had stopped counting must not count again.
  local exists = false
  for j = 1, NS do
    if st[j].hw ~= nil then exists = true end
  end
  local t = settle()
  local out = {bad, 0, now}
  if n > 0 then
    out[2] = layered_wait(now, n)
    -- measured from the caller's instant (strategy.StepTolerance)
    if out[2] > 0 then out[2] = out[2] + t - now end
  end
  for i = 1, NR do
    advance(RS[i], now)
    out[3 + i] = st[RS[i]].total
  end
  if pu > now then
    out[4 + NR] = pu
    if n > 0 then out[2] = math.max(out[2], pu - now) end
  else
    out[4 + NR] = 0
  end
  for i = 1, NR do
    local s = st[RS[i]]
    -- a figure about a window that has passed says nothing any more
    if s.rr >= 0 and s.ra + W[RS[i]] > now then
      out[3 + NR + 2 * i] = s.rr
      out[4 + NR + 2 * i] = s.ra
    else
      out[3 + NR + 2 * i] = -1
      out[4 + NR + 2 * i] = 0
    end
  end
  if exists then save() else write_key(L, nil) end
  return out
end

if op == 5 then -- release
  settle()
  for j = 1, NS do
    local s, g = st[j], G[j]
    local b = bidx(at, g)
    for i = s.nb, 1, -1 do
      local l, c = bk(s, i)
      local lb = bidx(l, g)
      if lb == b then
        local k = math.min(n, c)
        if k > 0 then
          put(s, i, l, c - k)
          s.total = s.total - k
        end
        break
      end
      if lb < b then break end
    end
  end
  save()
  return {bad}
end

if op == 6 then -- sync
  local t = settle()
  local r = q + 1
  for _ = 1, P[r] do
    local j, rem, used, rs = P[r + 1], P[r + 2], P[r + 3], P[r + 4]
    r = r + 4
    advance(j, t)
    local have = st[j].total
    -- raised requests stop counting when the upstream frees them, if it said when
    local a = t
    if rs > 0 and rs < W[j] then a = t + rs - W[j] end
    if have < used then add(j, a, used - have) end
    st[j].rr, st[j].ra = rem, t
  end
  if n > 0 and t + n > pu then pu = t + n end
  save()
  return {bad}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))
