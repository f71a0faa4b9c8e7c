-- End the claim of an occurrence that will not run (its publish failed, its beat stopped),
-- dropping the occurrence queued behind it, only while its lease still holds its lock: a claim
-- that may be another beat's is never ended. The rules are occurrence_lib.lua's, prepended to
-- this script.
--
-- Keys
--   KEYS[1]  the occurrence's lock (see occurrence_lib.lua); any key name when it took no lock.
--   KEYS[2]  its run state, `<prefix><job>` (see occurrence_lib.lua).
-- Arguments
--   ARGV[1]  the owner token of its lease ('' when it took no lock).
--   ARGV[2]  '1' when it took a lock.
--   ARGV[3]  the occurrence, in epoch milliseconds.
-- Returns
--   the queued occurrence dropped, in epoch milliseconds, or nil (none, or the lock is not
--   the lease's: nothing changes). The run state is deleted when ARGV[3] is its run.
if ARGV[2] == '1' and not lock_holds(KEYS[1], ARGV[1]) then
  return false
end
local dropped = run_drop_queued(KEYS[2])
run_finish(KEYS[2], ARGV[3], 0) -- nothing waits now: it deletes ARGV[3]'s run, promotes none
return dropped
