-- Strike a tenant off the join of its spread occurrence (RedisJobTenantRuns.complete).
--
-- Keys
--   KEYS[1]  the join, `<prefix><job>:<epoch ms>` (see tenant_runs_start.lua).
-- Arguments
--   ARGV[1]  the tenant whose run ended.
--   ARGV[2]  '1' when it failed, '0' when it succeeded.
--   ARGV[3]  the error code of its failure ('' when it succeeded).
--   ARGV[4]  the error type of its failure ('' when it succeeded).
-- Returns
--   {total, tenant, code, type} of the tally (the first failure's fields '' when every run
--   succeeded) to the call that struck off the last tenant, and to that call sent again;
--   nil otherwise: more tenants to run, a tenant already struck off or unknown, no join.
local last = redis.call('HGET', KEYS[1], 'last')
local function tally()
  local kept = redis.call('HMGET', KEYS[1], 'total', 'ft', 'fc', 'fe')
  return {kept[1], kept[2] or '', kept[3] or '', kept[4] or ''}
end
if last then
  if last == ARGV[1] then
    return tally()
  end
  return nil
end
local field = 'o:' .. ARGV[1]
local position = redis.call('HGET', KEYS[1], field)
if not position then
  return nil
end
redis.call('HDEL', KEYS[1], field)
if ARGV[2] == '1' then
  local first = redis.call('HGET', KEYS[1], 'fpos')
  if not first or tonumber(position) < tonumber(first) then
    redis.call('HSET', KEYS[1], 'fpos', position, 'ft', ARGV[1], 'fc', ARGV[3], 'fe', ARGV[4])
  end
end
if redis.call('HINCRBY', KEYS[1], 'left', -1) > 0 then
  return nil
end
redis.call('HSET', KEYS[1], 'last', ARGV[1])
return tally()
