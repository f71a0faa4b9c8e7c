-- Release a lock by its owner token: delete the key only if it still holds the token.
--
-- Keys
--   KEYS[1]  the lock key, `<prefix><key>` (by default exactly `job:<name>:<instant>`);
--            a string whose value is the owner token, set by `SET key token NX PX ttl`
--            and expiring on Redis's own clock.
-- Arguments
--   ARGV[1]  the owner token of the lease being released.
-- Returns
--   1 when the key held the token and was deleted; 0 when it expired or another owner
--   took it since, in which case nothing changes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
