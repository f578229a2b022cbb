-- One host's report for all its tenants, and its share of each tenant's
-- global quota back, in one atomic step.
--
-- KEYS[1]            the fleet's birth time (ms, Redis TIME): absent means
--                    the state is new or was lost, and leases that hosts
--                    still hold from before are unknown here
-- KEYS[3i-1], KEYS[3i], KEYS[3i+1]  tenant i's leases (hash: host -> JSON),
--                    its fleet count (hash: total) and this host's count
--                    (hash: epoch, cum, admitted), which expires after a day
--                    without a report, so that hosts gone for good leave
--                    nothing behind
-- ARGV: host, lease_ms, epoch, seq, nudge (the prefix of each host's nudge
--       channel), short_by (how far below its fair share a share may lag
--       unremarked), then per tenant:
--       quota, demand, admitted (cumulative in this epoch), held, held_ms
--       (the share the host applies from a lease now, and for how much
--       longer by its own clock: only read while the fleet is in grace)
-- A host left short of its fair share publishes its name to the channel of
-- every host whose lease commits more than that host's own fair share: they
-- report (and shrink) at once instead of at their next tick. Its record says
-- it is short (w), so that their confirmations nudge it back (ack.lua).
-- Returns strings: now_ms, grace (0/1), then per tenant:
--       share, expiry_ms, ack (1: the host must confirm it applied the
--       share, which is lower than what it held), total admitted, and the
--       fair share the host is owed (more than its share while others have
--       yet to shrink).
local host, lease_ms, epoch, seq = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local nudge, short_by = ARGV[5], tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local n = (#KEYS - 1) / 3
-- A host that comes back after this long in the same run counts its run's
-- admissions again: the count is a figure to watch, and a day is long past
-- any outage a fleet rides out on its local shares.
local count_kept_ms = 86400000

-- A lease record, decoded; nil for one that is not what this script
-- writes (another tool's key, a hand edit), which is then dropped rather
-- than failing every host's report.
local function record(lease_key, h, text)
  local ok, r = pcall(cjson.decode, text)
  if ok and type(r) == 'table' and type(r.s) == 'number' and type(r.e) == 'number' and type(r.d) == 'number' then
    return r
  end
  redis.log(redis.LOG_WARNING, 'shedder fleet: dropping a malformed lease record for ' .. h .. ' in ' .. lease_key)
  redis.call('HDEL', lease_key, h)
  return nil
end

-- This host's own records first: two daemons reporting under one host name
-- would each take the other's record as their own, and the quota twice.
-- A record carries the reporting run's epoch and the one before it; a
-- restart moves on to a new epoch, never back to the previous one.
-- A host that holds a live lease of which Redis has no record means the
-- state was lost (a restart from an old snapshot keeps `born`): grace.
local lost = false
for i = 1, n do
  local lease_key = KEYS[3 * i - 1]
  local a = 6 + (i - 1) * 5
  local held, held_ms = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local text = redis.call('HGET', lease_key, host)
  local mine = text and record(lease_key, host, text)
  if mine and mine.ep and mine.ep ~= epoch and mine.pep == epoch then
    return redis.error_reply('ERR two daemons report as host ' .. host .. ' (runs ' .. mine.ep .. ' and ' .. epoch ..
      '): give each its own [fleet] host')
  end
  if not mine and held > 0 and held_ms > 0 then lost = true end
end

local born = tonumber(redis.call('GET', KEYS[1]))
if not born or lost then
  born = now
  redis.call('SET', KEYS[1], tostring(now))
end
-- Until every lease granted before the state was lost has expired, nobody
-- grows: hosts renew at most what they say they hold.
local grace = now < born + lease_ms

-- Max-min fair shares of `quota` among `demands`, as a function of a
-- demand: every demand below the water level is met, the rest get the
-- level. Found once per tenant, so that judging every host's share costs a
-- sort, not one per host.
local function fair_shares(demands, quota)
  local n, sum = #demands, 0
  for _, d in ipairs(demands) do sum = sum + d end
  if sum <= quota then
    -- Room for everyone: the spare is split evenly, so that small rises
    -- are served before the next report.
    local spare = (quota - sum) / n
    return function(d) return d + spare end
  end
  local sorted = {}
  for i, d in ipairs(demands) do sorted[i] = d end
  table.sort(sorted)
  local remaining, level = quota, math.huge
  for k, d in ipairs(sorted) do
    if d > remaining / (n - k + 1) then
      level = remaining / (n - k + 1)
      break
    end
    remaining = remaining - d
  end
  return function(d) return math.min(d, level) end
end

-- What a lease record commits: its share, or an earlier larger share the
-- host has not yet confirmed it gave up, while unexpired.
local function committed(r)
  local c = 0
  if r.e > now then c = r.s end
  if r.ps and r.pe > now and r.ps > c then c = r.ps end
  return c
end

local out = {tostring(now), grace and '1' or '0'}
-- Hosts to nudge (a set: one message each, whatever the tenants).
local over = {}
for i = 1, n do
  local lease_key, count_key, host_count_key = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local a = 6 + (i - 1) * 5
  local quota, demand, cum = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local held, held_ms = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])

  local records = redis.call('HGETALL', lease_key)
  -- While a changed quota rolls out host by host, the hosts disagree on it:
  -- the smallest any live host has is the one shared out, so that no host
  -- is owed more than another leaves, and none is starved meanwhile.
  local demands, others, mine, peers, shared = {demand}, 0, nil, {}, quota
  for j = 1, #records, 2 do
    local h, r = records[j], record(lease_key, records[j], records[j + 1])
    if not r then
      -- Dropped.
    elseif h == host then
      mine = r
    elseif r.e > now or (r.t or 0) > now - lease_ms then
      -- A host that reported within a lease is in the fleet, with or
      -- without a lease (in grace it holds none): its demand counts.
      demands[#demands + 1] = r.d
      others = others + committed(r)
      peers[h] = r
      if type(r.qt) == 'number' and r.qt < shared then shared = r.qt end
    else
      -- Gone: its share is free; its count expires on its own.
      redis.call('HDEL', lease_key, h)
    end
  end
  if not mine and grace and held > 0 then
    -- A lease from before the state was lost: known again from the host.
    mine = {s = held, e = now + held_ms, d = demand, q = '', t = now}
  end
  local holds = mine and committed(mine) or 0

  local fair_of = fair_shares(demands, shared)
  local fair = fair_of(demand)
  local share = math.min(fair, shared - others)
  if grace then share = math.min(share, holds) end
  if share < 0 then share = 0 end
  local expiry = now + lease_ms
  if grace and share <= 0 then expiry = now end

  local r = {s = share, e = expiry, d = demand, q = seq, t = now, qt = quota, ep = epoch}
  if mine and mine.ep and mine.ep ~= epoch then r.pep = mine.ep else r.pep = mine and mine.pep end
  if not grace and share < fair * (1 - short_by) then
    r.w = 1
    -- (Past a rounding error: shares go through JSON.)
    for h, p in pairs(peers) do
      if committed(p) > fair_of(p.d) + shared * 1e-9 then over[h] = true end
    end
  end
  local ack = '0'
  if share < holds then
    -- Until the host confirms it applied the smaller share, the larger one
    -- stays committed (for as long as it could still be in use).
    r.ps, r.pe, ack = holds, math.max(mine.e, mine.pe or 0), '1'
  end
  redis.call('HSET', lease_key, host, cjson.encode(r))

  -- Admitted counts: cumulative per counter epoch, so a repeated or late
  -- report adds nothing twice, and a new epoch starts from zero.
  local base = redis.call('HMGET', host_count_key, 'epoch', 'cum')
  local delta = cum
  if base[1] == epoch then delta = cum - (tonumber(base[2]) or 0) end
  if delta > 0 then
    redis.call('HINCRBY', count_key, 'total', string.format('%d', delta))
    redis.call('HINCRBY', host_count_key, 'admitted', string.format('%d', delta))
    redis.call('HSET', host_count_key, 'epoch', epoch, 'cum', string.format('%d', cum))
  elseif not base[1] then
    redis.call('HSET', host_count_key, 'epoch', epoch, 'cum', '0')
  end
  redis.call('PEXPIRE', host_count_key, count_kept_ms)
  local total = redis.call('HGET', count_key, 'total') or '0'

  out[#out + 1] = string.format('%.6f', share)
  out[#out + 1] = string.format('%d', expiry)
  out[#out + 1] = ack
  out[#out + 1] = total
  out[#out + 1] = string.format('%.6f', fair)
end
for h in pairs(over) do redis.call('PUBLISH', nudge .. h, host) end
return out
