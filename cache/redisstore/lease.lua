-- In-flight leases of one logical key (cache.Leaser), in one Redis sorted set in the key's hash
-- tag: member the lease id, score the lease's expiry (µs, Redis TIME unless the clock is
-- overridden). A lease counts while now < expiry; expired ones are removed by every call.
--
-- KEYS[1]: the set; KEYS[2]: the set's tombstones (member a lease id released before its
-- acquire ran, score when the tombstone goes, µs). ARGV: op (1 acquire, 2 renew, 3 release,
-- 4 release of an acquire cut off on the wire: it may not have run yet, so the id is also
-- buried for ttl, and an acquire of a buried id takes nothing), clock override (µs, −1 for
-- TIME), lease id, limit, ttl (µs), slack (µs).
-- Returns {corrupt, ok, held, wait}: corrupt 1 when the key held another type (it is deleted
-- and started afresh), ok 1 when the lease was taken (acquire) or is still held (renew,
-- release: always 1), held the leases of the key after the call, wait (acquire refused) µs
-- until the earliest lease expires.
-- Calls: TIME; TYPE; ZREMRANGEBYSCORE; ZCARD; then ZADD, ZSCORE, ZRANGE, ZREM and PTTL and
-- PEXPIRE as the op needs. The set's TTL is kept at least its latest expiry + slack, so an
-- abandoned set goes by itself.
local k = KEYS[1]
local op, now, id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local limit, ttl, slack = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local corrupt = 0
local ty = redis.call('TYPE', k).ok
if ty ~= 'zset' and ty ~= 'none' then
  redis.call('DEL', k)
  corrupt = 1
end
redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
local held = redis.call('ZCARD', k)

-- extend keeps the set's TTL at least ttl + slack from now (whole ms, rounded up).
local function extend()
  local want = math.ceil((ttl + slack) / 1000)
  if redis.call('PTTL', k) < want then
    redis.call('PEXPIRE', k, want)
  end
end

if op == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZSCORE', KEYS[2], id) then
    return {corrupt, 0, held, 0} -- its caller gave up and released it already (op 4)
  end
  if held < limit then
    redis.call('ZADD', k, now + ttl, id)
    extend()
    return {corrupt, 1, held + 1, 0}
  end
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  return {corrupt, 0, held, tonumber(first[2]) - now}
elseif op == 2 then
  if not redis.call('ZSCORE', k, id) then
    return {corrupt, 0, held, 0}
  end
  redis.call('ZADD', k, now + ttl, id)
  extend()
  return {corrupt, 1, held, 0}
end
local removed = redis.call('ZREM', k, id)
if op == 4 and removed == 0 then
  local tomb = KEYS[2]
  redis.call('ZADD', tomb, now + ttl, id)
  local want = math.ceil((ttl + slack) / 1000)
  if redis.call('PTTL', tomb) < want then
    redis.call('PEXPIRE', tomb, want)
  end
end
return {corrupt, 1, held - removed, 0}
