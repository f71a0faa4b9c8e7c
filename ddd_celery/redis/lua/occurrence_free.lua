-- End the claim of an occurrence that will not run (its publish failed, its beat stopped),
-- dropping the occurrence queued behind it, only while its lease still holds its lock: a claim
-- that may be another beat's is never ended.
--
-- Keys
--   KEYS[1]  the occurrence's lock key (see release.lua); any key name when it took no lock.
--   KEYS[2]  its run state, `<prefix><job>` (see run_claim.lua).
-- Arguments
--   ARGV[1]  the owner token of its lease ('' when it took no lock).
--   ARGV[2]  '1' when it took a lock.
--   ARGV[3]  the occurrence, in epoch milliseconds.
-- Returns
--   the queued occurrence dropped, in epoch milliseconds, or nil (none, or the lock is not
--   the lease's: nothing changes). The run state is deleted when ARGV[3] is its run.
if ARGV[2] == '1' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
local queued = redis.call('HGET', KEYS[2], 'queued')
if queued then
  redis.call('HDEL', KEYS[2], 'queued')
end
if redis.call('HGET', KEYS[2], 'running') == ARGV[3] then
  redis.call('DEL', KEYS[2])
end
if queued then
  return tonumber(queued)
end
return false
