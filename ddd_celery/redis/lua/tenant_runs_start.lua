-- Open the join of a spread occurrence with its tenants (RedisJobTenantRuns.start).
--
-- Keys
--   KEYS[1]  the join, `<prefix><job>:<epoch ms>`, a hash that expires with the run:
--              `o:<tenant>`  the tenant's place in the directory's order, while its run is due
--              `total`       how many tenants the occurrence has
--              `left`        how many have not had their run
--              `fpos`, `ft`, `fc`, `fe`  the first failure: its place, tenant, error code, type
--              `last`        the tenant whose run ended the join (then `left` is 0)
-- Arguments
--   ARGV[1]  the join's time to live, in milliseconds (positive).
--   ARGV[2..] the tenants, in the directory's order, each once.
-- Returns
--   1 once opened; 0 when the occurrence already has a join (nothing changes).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local count = #ARGV - 1
local fields = {}
for i = 1, count do
  fields[#fields + 1] = 'o:' .. ARGV[i + 1]
  fields[#fields + 1] = i - 1
  if #fields >= 1000 then
    redis.call('HSET', KEYS[1], unpack(fields))
    fields = {}
  end
end
if #fields > 0 then
  redis.call('HSET', KEYS[1], unpack(fields))
end
redis.call('HSET', KEYS[1], 'total', count, 'left', count)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
