-- EVALSHA shim: appended by the Go loader to the library source (the text
-- before its "@@register" marker) when the server refuses the FUNCTION
-- command. It registers nothing; it dispatches one call by name.
--
-- KEYS     the function's KEYS, unchanged
-- ARGV[1]  the function name, e.g. "pelwarden_v1_claim"
-- ARGV[2..] the function's ARGV
-- Reply: the function's reply. Errors: the function's, or PWBADARG for an
-- unknown name.
local FUNCTIONS = {
  pelwarden_v1_claim = claim,
  pelwarden_v1_ack = ack,
  pelwarden_v1_deadletter = deadletter,
  pelwarden_v1_extend = extend,
  pelwarden_v1_release = release,
  pelwarden_v1_reap = reap,
  pelwarden_v1_redrive = redrive,
  pelwarden_v1_stats = stats,
  pelwarden_v1_trim = trim,
  pelwarden_v1_trim_plan = trimplan,
  pelwarden_v1_version = version,
}
local fn = FUNCTIONS[ARGV[1]]
if fn == nil then
  return fail(ERRORS.BADARG, 'unknown function ' .. tostring(ARGV[1]))
end
local args = {}
for i = 2, #ARGV do args[i - 1] = ARGV[i] end
return fn(KEYS, args)
