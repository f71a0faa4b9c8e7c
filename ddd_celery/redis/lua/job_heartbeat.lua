-- Extend a running job's lease, when the lease named is still the job's.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the job's hash (lease_token, lease_expires_at); also P leases.
-- Arguments
--   ARGV[2]  the job id.
--   ARGV[3]  the lease's token.
--   ARGV[4]  the new expiry, epoch ms.
-- Returns
--   1 when extended; 0 when the lease is lost (nothing changes).
local job = leased(ARGV[2], ARGV[3])
if not job then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_expires_at', ARGV[4])
redis.call('ZADD', P .. 'leases', ARGV[4], job.id)
return 1
