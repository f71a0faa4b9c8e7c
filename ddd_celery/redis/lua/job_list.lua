-- A page of the listing (list_page): the jobs a filter reaches, most recently enqueued first.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1..n]  listing indexes (P list:all, P list:status:<status>, P list:name:<name>,
--               P list:tenant:<tenant>) each holding every job the filter reaches: the one
--               with the fewest members (ZCARD) is read, the filter applied to what it reads.
--   Also P job:<id> of each job read (HMGET, and HGETALL of each one found).
-- Arguments
--   ARGV[2]   where to start, as ZREVRANGEBYLEX's max: '+' (the latest), or '(' and the
--             member of the last job read before (a page's cursor).
--   ARGV[3]   enqueued_since, epoch ms, or '' for none: where to stop.
--   ARGV[4]   how many jobs to find at most; ARGV[5] how many entries to read at most (the
--             caller calls again from where this call stopped, so Redis is never held long).
--   ARGV[6]   now, epoch ms.
--   ARGV[7]   the status, or '' for any; ARGV[8] for status queued, 'due' (run_at not after
--             now: ready), 'later' (scheduled), or '' for either.
--   ARGV[9]   the job name, ARGV[10] the queue, ARGV[11] the tenant: each '=<value>', or '*'
--             for any ('=' is the tenant of jobs without one).
--   ARGV[12]  finished_since, epoch ms, or '' for none.
-- Returns
--   a list of three: a flat list of member, record (HGETALL) of each job found, latest first;
--   the member of the last entry read ('' for none); 1 when the index has no entry after it
--   (the listing is over), else 0. An entry whose job hash is gone is dropped from the index.
local index, size = nil, nil
for _, key in ipairs(KEYS) do
  local n = redis.call('ZCARD', key)
  if not size or n < size then
    index, size = key, n
  end
end
local upper, lower = ARGV[2], '-'
if ARGV[3] ~= '' then
  lower = '[' .. string.format('%015d', tonumber(ARGV[3]) + ORIGIN_MS)
end
local need, budget, now = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local status, due, finished_since = ARGV[7], ARGV[8], tonumber(ARGV[12])

local function matches(id)
  local f = redis.call('HMGET', job_key(id), 'status', 'name', 'queue', 'tenant', 'run_at',
    'finished_at')
  if not f[1] then
    return nil
  end
  if status ~= '' and f[1] ~= status then
    return false
  end
  if due ~= '' and (tonumber(f[5]) <= now) ~= (due == 'due') then
    return false
  end
  if (ARGV[9] ~= '*' and ARGV[9] ~= '=' .. f[2]) or (ARGV[10] ~= '*' and ARGV[10] ~= '=' .. f[3])
      or (ARGV[11] ~= '*' and ARGV[11] ~= '=' .. f[4]) then
    return false
  end
  return not finished_since or (f[6] ~= false and tonumber(f[6]) >= finished_since)
end

local found, matched, read, last, over = {}, 0, 0, '', 0
while matched < need and read < budget do
  local chunk = math.min(budget - read, math.max(need - matched, 64))
  local entries = redis.call('ZREVRANGEBYLEX', index, upper, lower, 'LIMIT', 0, chunk)
  for i, entry in ipairs(entries) do
    read, last = read + 1, entry
    -- the member is `<15 digits>:<id>`
    local id = string.sub(entry, 17)
    local reached = matches(id)
    if reached == nil then
      redis.call('ZREM', index, entry)
    elseif reached then
      found[#found + 1] = entry
      found[#found + 1] = redis.call('HGETALL', job_key(id))
      matched = matched + 1
      if matched == need then
        if i == #entries and #entries < chunk then
          over = 1
        end
        break
      end
    end
  end
  if matched < need and #entries < chunk then
    over = 1
    break
  end
  upper = '(' .. last
end
return {found, last, over}
