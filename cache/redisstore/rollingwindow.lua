-- Rolling-window state of one logical key, all rules at once, in one atomic step, in one Redis
-- string. Mirrors rollingwindow.Log: per counter, buckets of granularity G keep a count and their
-- latest instant; a bucket counts until latest + W; the counter's time (hw) never goes
-- backwards. Self-contained (state.lua is not put before it): Redis runs the whole script on
-- every call, so each local function is a closure made anew and each table an allocation,
-- about 0.15 and 0.25 µs of the server's time here; this script keeps to few of either.
--
-- ARGV[1], the only argument (state.lua): op, n (for sync: the pause, µs), clock override,
-- at, step, NS, NR, K, then K doubles: slack (µs), per slot W and G (µs), per rule its slot
-- (1-based) and effective limit; for sync, then the report count and per report its slot,
-- remaining, used, reset (µs, 0 when unknown) and fixed (engine.Report.Fixed: the rule's
-- effective limit, else 0); then the value prefix.
-- KEYS[1] (state.lua's layout, magic "rw"): after the prefix, doubles off, x, pu, then per slot
-- hw, total (of all its buckets), nb (buckets in its array), rr, ra (the remaining count the
-- upstream last reported and when; rr −1 when none), hl, hc (the newest bucket: its latest
-- instant, −2^53 when the slot has no bucket, and count), then per slot its array: nb older
-- buckets of two doubles, latest instant and count, oldest first (so by bucket, floor(latest /
-- G), too). A record in the newest bucket's granule, the common case, changes the doubles
-- only; the array grows by one bucket when a granule starts and shrinks when the oldest stop
-- counting.
-- Returns {corrupt, ...}: state.lua's code (0: the key was usable or absent), then
--   record/release/sync {}; reserve {allowed, wait, at}; peek {wait, now, used..., paused
--   until (0 when not paused), then per rule reported remaining and its instant (−1 and 0
--   when none)}; admit {allowed, wait, 0, at, then per rule used, reset, 0} (the zeros are the
--   ns parts of the durations, as the other scripts return them). µs.
-- Calls: TIME (unless the clock is overridden); GETRANGE of the header (prefix and doubles);
-- STRLEN, which must be the length the header gives (else the value was cut short: it is read
-- whole, found unreadable and started afresh); then, when the operation needs no bucket but
-- the newest of each slot (no pruning due, every rule with room, the newest bucket in the
-- granule recorded in), SETRANGE of the header in place when it changed, and PEXPIRE when the
-- TTL must move. Else GET of the whole value and SET (KEEPTTL, or PX when the TTL must move).
-- An absent key: TIME, GETRANGE, SET PX. The TTL moves when it falls short of
-- a slot's newest request's window or of the pause; it is then set to that + slack. Only the
-- buckets at the edges are decoded: the oldest (pruning, waits), the newest (records, resets).
--
-- Smoothing (engine.Strategy.Smoothed): a slot whose plan G is negative is a GCRA, not a log:
-- its plan W is the span b·T and −G the emission interval T (µs). It keeps the rolling slot's
-- eight doubles, with its theoretical arrival time (TAT) in hl (−2^53 until charged, read as
-- the slot's time) and total 0, nb 0, rr −1, ra 0, hc 0, lo −2^53. A value holding anything
-- else there, or a TAT more than b·T past hw (or a TAT without an hw), was not written by a
-- script and is started afresh; a TAT before hw is an idle GCRA. A burst of k fits at u when
-- max(TAT, u) + k·T ≤ u + b·T; recording it moves TAT there, never past u + b·T
-- (engine.GCRA). Reserve, admit and peek wait for the rules and for every GCRA, in the same
-- step; release refunds the GCRA too.
--
-- Clock steps (engine.Rebase, DESIGN §9), as state.lua's key_instant: every instant of a
-- key (hw, bucket instants, the pause, ra, x, the at of a release) is on the key's own
-- timeline, the store's clock plus the key's offset. When that instant is more than the step
-- tolerance behind the latest instant the strategy's slots have seen, the offset is raised so
-- that the key's instant is that latest instant, and written with the key (refusals and peeks
-- included). The buckets are not rewritten; nothing that counts moves, and every wait told
-- holds on the new clock. TTLs are durations, so on Redis's own clock.

local sub, unpackd, packd, rep, fmod = string.sub, struct.unpack, struct.pack, string.rep, math.fmod
local NONE = -9007199254740992 -- a slot's hw when it has none (−2^53, below every instant)

local a = ARGV[1]
local op, n, clk, at, STEP, NS, NR, K, p = unpackd('<dddddddd', a)
local P = {unpackd('<' .. rep('d', K), a, p)}
local pre = sub(a, P[K + 1])
local S = P[1]
-- slot j: W = P[2j], G = P[2j+1]; rule i: slot P[R+2i], limit P[R+2i+1]
local R = 2 * NS

local raw = clk
if clk < 0 then
  local t = redis.call('TIME')
  raw = t[1] * 1000000 + t[2]
end

-- H: off, x, pu, then per slot of the strategy (b = 8j − 4) hw, total, nb, rr, ra, hl, hc, lo
-- (the oldest bucket's latest instant, −2^53 when none: pruning is due when lo + W ≤ the
-- slot's time); A: per slot its array, packed, once read; F: the slots of other strategies on
-- the key, kept as they are.
local bad = 0 -- state.lua's codes: 1 WRONGTYPE, 2 foreign, 3 other version, 4 unreadable
local H, A, F, own, v = nil, {}, nil, nil, false
local hp = #pre
local HL = hp + 8 * (3 + 8 * NS) -- the header's length: prefix and doubles
local hf = '<' .. rep('d', 3 + 8 * NS)
local fresh

-- Whether the doubles X (off, x, pu, then per slot of the ns stored the 8 of the header) and,
-- when arrs is given, the slots' arrays hold figures a script could have written (issue 14;
-- the prefix and length say nothing of them: a NaN total never fills, as NaN compares false,
-- and a pause far ahead locks the key out). As state.lua's sound_head: counts integers from 0
-- to 2^53 (y % 1 is NaN for NaN and ±inf), nb an integer ≥ 0, rr one ≥ −1, off and pu ≥ 0,
-- instants from −2^53 (NONE) to the key's instant plus strategy.MaxWindow (µs, checked equal
-- by TestScriptsBoundInstantsByMaxWindow), the slack and the step tolerance (written "not (lo <= y and y <= hi)"
-- so that NaN fails too). Cost: about 1 µs for the header's doubles on every call. Decoding
-- every bucket would cost about 0.1 µs a double (a full 3-rule key: 75 µs), so with arrs only
-- the buckets at the array's edges are checked, the ones the operations decode first: the
-- oldest is the header's lo, the newest no later than hl, both counts sound and within what
-- the total leaves beside hc (with one bucket, exactly that).
local MAXW = 315360000000000
local function sound(X, ns, arrs)
  local off, x, pu = X[1], X[2], X[3]
  if off % 1 ~= 0 or not (off >= 0 and raw + off < -NONE) then return false end
  local top = raw + off + MAXW + P[1] + STEP + 1
  if not (x >= NONE and x <= top and pu >= 0 and pu <= top) then return false end
  for i = 1, ns do
    local b = 8 * i - 4
    local hw, tot, nb, rr, ra, hl, hc, lo = X[b], X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5], X[b + 6], X[b + 7]
    if not (hw >= NONE and hw <= top and tot >= 0 and tot <= -NONE and nb >= 0 and rr >= -1 and rr <= -NONE
        and ra >= NONE and ra <= top and hl >= NONE and hl <= top and hc >= 0 and hc <= tot and lo >= NONE and lo <= top)
      or tot % 1 ~= 0 or nb % 1 ~= 0 or rr % 1 ~= 0 or hc % 1 ~= 0 then
      return false
    end
    if arrs and nb > 0 then
      local l1, c1 = unpackd('<dd', arrs[i], 1)
      local l2, c2 = unpackd('<dd', arrs[i], 16 * nb - 15)
      local rest = tot - hc
      if l1 ~= lo or not (l2 >= l1 and l2 <= hl and c1 >= 0 and c2 >= 0) or c1 % 1 ~= 0 or c2 % 1 ~= 0
        or (nb == 1 and c1 ~= rest) or (nb > 1 and c1 + c2 > rest) then
        return false
      end
    end
  end
  return true
end

-- Whether the strategy's GCRA slots in X (its own layout: off, x, pu, then 8 per slot) hold
-- what a script writes (see Smoothing above).
local function gcra_sound(X)
  for j = 1, NS do
    if P[2 * j + 1] < 0 then
      local b = 8 * j - 4
      local hw, tat = X[b], X[b + 5]
      if X[b + 1] ~= 0 or X[b + 2] ~= 0 or X[b + 3] ~= -1 or X[b + 4] ~= 0 or X[b + 6] ~= 0 or X[b + 7] ~= NONE
        or (tat ~= NONE and not (hw ~= NONE and tat <= hw + P[2 * j])) then
        return false
      end
    end
  end
  return true
end

-- Read the whole value into H, A and F: val, or with val nil GET; a key that cannot be used
-- starts afresh.
local function load_full(val)
  H, A, F, own, bad = nil, {}, nil, nil, 0
  v = val
  if v == nil then v = redis.pcall('GET', KEYS[1]) end
  if type(v) == 'table' then
    bad, v = 1, false
  elseif v then
    if sub(v, 1, hp) == pre then
      local c = 3 + 8 * NS
      if #v >= hp + 8 * c then
        H = {unpackd(hf, v, hp + 1)}
        local pos, len = H[c + 1], #v
        H[c + 1] = nil
        for j = 1, NS do
          local nb = H[8 * j - 2]
          local e = pos + 16 * nb
          if nb < 0 or nb % 1 ~= 0 or e > len + 1 then
            pos = -1
            break
          end
          A[j] = sub(v, pos, e - 1)
          pos = e
        end
        if pos ~= len + 1 or not sound(H, NS, A) or not gcra_sound(H) then H = nil end
      end
      if H == nil then bad = 4 end
    elseif sub(v, 1, 2) ~= 'rw' then
      bad = 2
    elseif sub(v, 3, 3) ~= '1' then
      bad = 3
    else
      -- a key shared with another strategy: its slots by ID, the strategy's first
      bad = 4
      local len = #v
      local sl = len >= 5 and unpackd('<H', v, 4) or len
      local hs = 5 + sl
      if len >= hs then
        local ids = {}
        for id in string.gmatch(sub(v, 6, hs), '[^,]+') do ids[#ids + 1] = id end
        local ns = #ids
        local c = 3 + 8 * ns
        if len >= hs + 8 * c then
          local X = {unpackd('<' .. rep('d', c), v, hs + 1)}
          local pos, arrs = X[c + 1], {}
          for i = 1, ns do
            local nb = X[8 * i - 2]
            local e = pos + 16 * nb
            if nb < 0 or nb % 1 ~= 0 or e > len + 1 then
              pos = -1
              break
            end
            arrs[i] = sub(v, pos, e - 1)
            pos = e
          end
          if pos == len + 1 and sound(X, ns, arrs) then
            bad, own, F = 0, {}, {}
            for id in string.gmatch(sub(pre, 6), '[^,]+') do own[#own + 1] = id end
            H = {X[1], X[2], X[3]}
            for j = 1, NS do
              local b = 8 * j - 4
              H[b], H[b + 1], H[b + 2], H[b + 3], H[b + 4], H[b + 5], H[b + 6], H[b + 7], A[j] = NONE, 0, 0, -1, 0, NONE, 0, NONE, ''
            end
            for i = 1, ns do
              local xb, mine = 8 * i - 4, nil
              for j = 1, NS do
                if own[j] == ids[i] then mine = j end
              end
              if mine then
                local b = 8 * mine - 4
                for f = 0, 7 do H[b + f] = X[xb + f] end
                A[mine] = arrs[i]
              else
                F[#F + 1] = {ids[i], X[xb], X[xb + 1], X[xb + 2], X[xb + 3], X[xb + 4], X[xb + 5], X[xb + 6], X[xb + 7], arrs[i]}
              end
            end
            if #F == 0 then F = nil end
            if not gcra_sound(H) then
              bad, own, F, H, A = 4, nil, nil, nil, {}
            end
          end
        end
      end
    end
  end
  fresh = H == nil
  if fresh then
    v = false
    H = {0, 0, 0}
    for j = 1, NS do
      local b = 8 * j - 4
      H[b], H[b + 1], H[b + 2], H[b + 3], H[b + 4], H[b + 5], H[b + 6], H[b + 7], A[j] = NONE, 0, 0, -1, 0, NONE, 0, NONE, ''
    end
  end
end

-- First the header alone (GETRANGE): the buckets (a busy key's, up to 16 KiB per slot) are left
-- in Redis while the operation needs no bucket but the newest of each slot, and the header is
-- rewritten in place: each KiB a Lua string is made of costs the server about 1 µs here, more
-- than STRLEN and SETRANGE do.
local head = redis.pcall('GETRANGE', KEYS[1], 0, HL - 1)
local ranged = type(head) == 'string' and #head == HL and sub(head, 1, hp) == pre
if ranged then
  H = {unpackd(hf, head, hp + 1)}
  H[#H] = nil
  fresh = false
  -- the value must be as long as its arrays say (else it was cut short: read whole, it is
  -- found unreadable and started afresh)
  local len = HL
  for j = 1, NS do len = len + 16 * H[8 * j - 2] end
  if not sound(H, NS, nil) or not gcra_sound(H) or redis.call('STRLEN', KEYS[1]) ~= len then
    ranged = false
    load_full(nil)
  end
elseif head == '' then
  load_full(false)
else
  load_full(nil)
end

-- The key's instant (now) and the instant operations that move its time are decided at (t,
-- the latest of now and every slot's time), rebasing the key when its clock stepped back.
local off, pu, now, hw, t
local function settle()
  off, pu = H[1], H[3]
  now, hw = raw + off, NONE
  for j = 1, NS do
    if H[8 * j - 4] > hw then hw = H[8 * j - 4] end
  end
  if hw ~= NONE and hw - now > STEP then
    off = off + (hw - now)
    now = hw
  end
  t = now
  if hw > now then t = hw end
end
settle()

-- With the header alone, the operation must touch no bucket but the newest of each slot:
-- no pruning due, no wait to walk (every rule has room), the newest bucket in the granule
-- of the instant recorded at. Else the whole value is read, before anything changes.
if ranged then
  local ok = op <= 4
  local smooth = false
  for j = 1, NS do
    if P[2 * j + 1] < 0 then smooth = true end
  end
  for j = 1, NS do
    if not ok then break end
    local b, w, g = 8 * j - 4, P[2 * j], P[2 * j + 1]
    local lo, hl = H[b + 7], H[b + 5]
    if lo ~= NONE and lo + w <= t then ok = false end
    if hl ~= NONE and op ~= 4 and g > 0 then
      local u = op == 1 and now or t
      if u + w <= H[b] then u = H[b] end
      if u - fmod(u, g) ~= hl - fmod(hl, g) then ok = false end
    end
    -- admit's reset walks the array back when the newest bucket will hold nothing (a release
    -- emptied it) while the slot counts; a GCRA may refuse what the rules admit, and then
    -- nothing is added to it
    if op == 3 and H[b + 6] + (smooth and 0 or n) <= 0 and H[b + 1] > 0 then ok = false end
  end
  if ok and op ~= 1 and (n > 0 or op ~= 4) then -- reserve and admit walk waits even for n = 0
    for i = 1, NR do
      local j = P[R + 2 * i]
      if H[8 * j - 3] + n > P[R + 2 * i + 1] then ok = false end
    end
  end
  if not ok then
    load_full()
    settle()
    ranged = false
  end
end

-- Move slot j's time to u if later and drop the buckets that stop counting there (the newest,
-- in the doubles, only once the array is empty).
local function advance(j, u)
  local b = 8 * j - 4
  if u <= H[b] then return H[b] end
  H[b] = u
  local lo, w = H[b + 7], P[2 * j]
  if lo == NONE or lo + w > u then return u end
  local hl, nb, tot = H[b + 5], H[b + 2], H[b + 1]
  local i = 0
  if nb > 0 then
    local arr = A[j]
    while i < nb do
      local l, c = unpackd('<dd', arr, 16 * i + 1)
      if l + w > u then break end
      tot = tot - c
      i = i + 1
    end
    if i > 0 then A[j], H[b + 2] = sub(arr, 16 * i + 1), nb - i end
  end
  if i == nb and hl + w <= u then
    tot = tot - H[b + 6]
    H[b + 5], H[b + 6] = NONE, 0
  end
  H[b + 1] = tot
  if H[b + 2] > 0 then
    H[b + 7] = unpackd('<dd', A[j], 1)
  else
    H[b + 7] = H[b + 5]
  end
  return u
end

-- record k at u; a record dated so early it would no longer count at the slot's time counts
-- at that time instead (never dropped, as rollingwindow.Log.Add)
local function add(j, u, k)
  local b, w, g = 8 * j - 4, P[2 * j], P[2 * j + 1]
  local h = advance(j, u)
  if g < 0 then -- a GCRA: charge k at the slot's time, at most a full burst
    local tat = H[b + 5]
    if tat < h then tat = h end
    if k * -g >= w then
      tat = h + w
    else
      tat = math.min(tat + k * -g, h + w)
    end
    H[b + 5] = tat
    return
  end
  if u + w <= h then u = h end
  H[b + 1] = H[b + 1] + k
  local hl = H[b + 5]
  if hl == NONE then -- no bucket (so no array either)
    H[b + 5], H[b + 6], H[b + 7] = u, k, u
    return
  end
  local m, hm = u - fmod(u, g), hl - fmod(hl, g) -- the granules' starts: exact (fmod is exact on doubles)
  if hm == m then
    if u > hl then H[b + 5] = u end
    H[b + 6] = H[b + 6] + k
    if H[b + 2] == 0 then H[b + 7] = H[b + 5] end
    return
  end
  local arr, nb = A[j], H[b + 2]
  if hm < m then -- a new granule: the newest bucket joins the array
    A[j], H[b + 2], H[b + 5], H[b + 6] = arr .. packd('<dd', hl, H[b + 6]), nb + 1, u, k
    return
  end
  -- older than the newest bucket: into the array, walking back from its newest
  local i = nb
  while i >= 1 do
    local l, c = unpackd('<dd', arr, 16 * i - 15)
    local lm = l - fmod(l, g)
    if lm == m then
      if l < u then l = u end
      A[j] = sub(arr, 1, 16 * i - 16) .. packd('<dd', l, c + k) .. sub(arr, 16 * i + 1)
      H[b + 7] = unpackd('<dd', A[j], 1)
      return
    end
    if lm < m then break end
    i = i - 1
  end
  A[j], H[b + 2] = sub(arr, 1, 16 * i) .. packd('<dd', u, k) .. sub(arr, 16 * i + 1), nb + 1
  H[b + 7] = unpackd('<dd', A[j], 1)
end

-- Write the key back: the strategy's slots that have a time, then the others' as they were.
-- Its TTL is set when it would end before the newest request of a slot stops counting or the
-- pause ends (to that instant plus slack), else kept (KEEPTTL); nothing is written when the
-- value is what was read. A key found unusable with nothing to keep is deleted.
local function save()
  if pu <= now then pu = 0 end
  H[1], H[3] = off, pu
  local need, all = NONE, F == nil
  if pu > 0 then need = pu end
  for j = 1, NS do
    local h = H[8 * j - 4]
    if h == NONE then
      all = false
    elseif h + P[2 * j] > need then
      need = h + P[2 * j]
    end
  end
  -- another strategy's slots keep the expiry they were given, less its slack
  if F and H[2] - S > need then need = H[2] - S end
  if need == NONE then
    if bad ~= 0 then redis.call('DEL', KEYS[1]) end
    return
  end
  local ttl
  if fresh or H[2] < need then
    H[2] = need + S
    ttl = math.max(1, math.ceil((H[2] - now) / 1000))
  end
  local value
  if ranged then
    -- the header alone changed: written in place, the buckets and the TTL left as they are
    value = pre .. packd(hf, unpack(H))
    if value ~= head then redis.call('SETRANGE', KEYS[1], 0, value) end
    if ttl then redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl)) end
    return
  end
  if all then
    value = pre .. packd(hf, unpack(H)) .. table.concat(A)
  else
    if own == nil then
      own = {}
      for id in string.gmatch(sub(pre, 6), '[^,]+') do own[#own + 1] = id end
    end
    local ids, nums, arrs = {}, {H[1], H[2], H[3]}, {}
    for j = 1, NS do
      local b = 8 * j - 4
      if H[b] ~= NONE then
        ids[#ids + 1], arrs[#arrs + 1] = own[j], A[j]
        for f = 0, 7 do nums[#nums + 1] = H[b + f] end
      end
    end
    for _, f in ipairs(F or {}) do
      ids[#ids + 1], arrs[#arrs + 1] = f[1], f[10]
      for i = 2, 9 do nums[#nums + 1] = f[i] end
    end
    local sig = table.concat(ids, ',')
    value = 'rw1' .. packd('<H', #sig) .. sig .. packd('<' .. rep('d', #nums), unpack(nums)) .. table.concat(arrs)
  end
  if ttl then
    redis.call('SET', KEYS[1], value, 'PX', string.format('%d', ttl))
  elseif value ~= v then
    redis.call('SET', KEYS[1], value, 'KEEPTTL')
  end
end

if op == 1 then -- record
  for j = 1, NS do add(j, now, n) end
  save()
  return {bad}
end

-- smallest d >= 0 with used(u+d) + k <= limit in slot j, measured from the slot's time; the
-- largest over the rules
local function wait(u, k)
  local d = 0
  for i = 1, NR do
    local j, limit = P[R + 2 * i], P[R + 2 * i + 1]
    local h = advance(j, u)
    local b = 8 * j - 4
    local excess = H[b + 1] + k - limit
    if excess > 0 then
      local arr, freed, x, found = A[j], 0, P[2 * j], false
      for q = 0, H[b + 2] - 1 do
        local l, c = unpackd('<dd', arr, 16 * q + 1)
        freed = freed + c
        if freed >= excess then
          x, found = l + P[2 * j] - h, true
          break
        end
      end
      if not found and H[b + 5] ~= NONE and freed + H[b + 6] >= excess then x = H[b + 5] + P[2 * j] - h end
      if x > d then d = x end
    end
  end
  -- every GCRA's: until max(TAT, h) + k·T ≤ h + d + b·T
  for j = 1, NS do
    local T = -P[2 * j + 1]
    if T > 0 then
      local h = advance(j, u)
      local tat = H[8 * j + 1]
      if tat < h then tat = h end
      local x = tat + k * T - P[2 * j] - h
      if x > d then d = x end
    end
  end
  return d
end

if op == 2 then -- reserve
  local d = wait(t, n)
  if pu > t and pu - t > d then d = pu - t end
  if d == 0 then
    for j = 1, NS do add(j, t, n) end
  end
  save()
  -- the wait is measured from the caller's instant (engine.StepTolerance)
  if d > 0 then return {bad, 0, d + t - now, t} end
  return {bad, 1, 0, t}
end

if op == 3 then -- admit
  -- engine.Strategy.Admit: Reserve's decision (a pause does not hold a server's admissions),
  -- then every rule's used count and reset at the decision's instant
  local sk = t - now -- waits are measured from the caller's instant (engine.StepTolerance)
  local d = wait(t, n)
  if d == 0 then
    for j = 1, NS do add(j, t, n) end
  end
  local out = {bad, d == 0 and 1 or 0, d > 0 and d + sk or 0, 0, t}
  for i = 1, NR do advance(P[R + 2 * i], t) end
  save()
  for i = 1, NR do
    local j = P[R + 2 * i]
    local b = 8 * j - 4
    local used, r = H[b + 1], 0
    if used > 0 then
      -- time until the slot counts nothing: its newest bucket that holds a count leaving the
      -- window (rollingwindow.Log.WaitTime(t, limit, limit))
      r = P[2 * j]
      if H[b + 5] ~= NONE and H[b + 6] > 0 then
        r = H[b + 5] + P[2 * j] - t
      else
        for q = H[b + 2], 1, -1 do
          local l, c = unpackd('<dd', A[j], 16 * q - 15)
          if c > 0 then
            r = l + P[2 * j] - t
            break
          end
        end
      end
    end
    out[#out + 1] = used
    out[#out + 1] = r > 0 and r + sk or 0
    out[#out + 1] = 0
  end
  return out
end

if op == 4 then -- peek
  -- A key with state keeps the time of the peek, as every operation does: were Redis TIME to
  -- step back, usage that had stopped counting must not count again.
  local exists = hw ~= NONE
  local out = {bad, 0, now}
  if n > 0 then
    out[2] = wait(now, n)
    -- measured from the caller's instant (engine.StepTolerance)
    if out[2] > 0 then out[2] = out[2] + t - now end
  end
  for i = 1, NR do
    local j = P[R + 2 * i]
    advance(j, now)
    out[3 + i] = H[8 * j - 3]
  end
  if pu > now then
    out[4 + NR] = pu
    if n > 0 and pu - now > out[2] then out[2] = pu - now end
  else
    out[4 + NR] = 0
  end
  for i = 1, NR do
    local j = P[R + 2 * i]
    local b = 8 * j - 4
    -- a figure about a window that has passed says nothing any more
    if H[b + 3] >= 0 and H[b + 4] + P[2 * j] > now then
      out[3 + NR + 2 * i] = H[b + 3]
      out[4 + NR + 2 * i] = H[b + 4]
    else
      out[3 + NR + 2 * i] = -1
      out[4 + NR + 2 * i] = 0
    end
  end
  if exists then
    save()
  elseif bad ~= 0 then
    redis.call('DEL', KEYS[1])
  end
  return out
end

if op == 5 then -- release
  for j = 1, NS do
    local b, g, arr = 8 * j - 4, P[2 * j + 1], A[j]
    local m, hl = at - fmod(at, g), H[b + 5]
    local hm = hl - fmod(hl, g)
    if g < 0 then
      -- a GCRA: refund n·T (a full burst at most), not before the slot's time; a charge older
      -- than b·T is paid off already
      local h, w = H[b], P[2 * j]
      if h ~= NONE and hl ~= NONE and at + w > h then
        local back = w
        if n * -g < w then back = n * -g end
        hl = hl - back
        if hl < h then hl = h end
        H[b + 5] = hl
      end
    elseif hl == NONE or hm < m then
      -- no bucket holds at
    elseif hm == m then
      local k = math.min(n, H[b + 6])
      H[b + 6], H[b + 1] = H[b + 6] - k, H[b + 1] - k
    else
      for i = H[b + 2], 1, -1 do
        local l, c = unpackd('<dd', arr, 16 * i - 15)
        local lm = l - fmod(l, g)
        if lm == m then
          local k = math.min(n, c)
          if k > 0 then
            A[j] = sub(arr, 1, 16 * i - 16) .. packd('<dd', l, c - k) .. sub(arr, 16 * i + 1)
            H[b + 1] = H[b + 1] - k
          end
          break
        end
        if lm < m then break end
      end
    end
  end
  save()
  return {bad}
end

-- Make every request slot j holds stop counting at u at the latest (rollinglog.Log.Cap): a
-- bucket that would count past u is dated u − W; with u at or before the slot's time, the slot
-- is emptied. A GCRA slot is left as it is.
local function cap(j, u)
  local b, w = 8 * j - 4, P[2 * j]
  if P[2 * j + 1] < 0 or H[b + 5] == NONE then return end
  local recs, arr = {}, A[j] or ''
  for i = 1, H[b + 2] do
    local l, c = unpackd('<dd', arr, 16 * i - 15)
    recs[#recs + 1], recs[#recs + 2] = l, c
  end
  recs[#recs + 1], recs[#recs + 2] = H[b + 5], H[b + 6]
  H[b + 1], H[b + 2], A[j], H[b + 5], H[b + 6], H[b + 7] = 0, 0, '', NONE, 0, NONE
  if u <= H[b] then return end
  for i = 1, #recs, 2 do
    local l, c = recs[i], recs[i + 1]
    if l > u - w then l = u - w end
    if c > 0 then add(j, l, c) end
  end
end

if op == 6 then -- sync
  local r = R + 2 * NR + 2
  local paused = pu > t -- before this update (engine.Strategy.fixedReport)
  for _ = 1, P[r] do
    local j, rem, used, rs, fx = P[r + 1], P[r + 2], P[r + 3], P[r + 4], P[r + 5]
    r = r + 5
    advance(j, t)
    local b = 8 * j - 4
    if fx > 0 then -- a fixed window's figure, fx its rule's limit: engine.Strategy.fixedReport
      if rs > 0 then
        if rs < P[2 * j] then cap(j, t + rs) end
      elseif rem == 0 or (H[b + 3] == 0 and rem > 0 and not paused and H[b + 1] >= fx) then
        cap(j, t)
      end
    end
    local have = H[b + 1]
    -- raised requests stop counting when the upstream frees them, if it said when
    local u = t
    if rs > 0 and rs < P[2 * j] then u = t + rs - P[2 * j] end
    if have < used then add(j, u, used - have) end
    H[b + 3], H[b + 4] = rem, t
  end
  if n > 0 and t + n > pu then pu = t + n end
  save()
  return {bad}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))
