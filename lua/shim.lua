-- EVALSHA shim: appended by the Go loader to the library source (the text
-- before its "@@register" marker) when the server refuses the FUNCTION
-- command. It registers nothing; it dispatches one call by name.
--
-- KEYS     the function's KEYS, unchanged
-- ARGV[1]  the function name, e.g. "pelwarden_v1_claim"
-- ARGV[2..] the function's ARGV
-- Reply: the function's reply. Errors: the function's, or PWBADARG for an
-- unknown name.
-- The functions are the library's FUNCTIONS table, defined above the
-- marker.
local fn = nil
for i = 1, #FUNCTIONS do
  if FUNCTIONS[i].name == ARGV[1] then
    fn = FUNCTIONS[i].fn
    break
  end
end
if fn == nil then
  return fail(ERRORS.BADARG, 'unknown function ' .. tostring(ARGV[1]))
end
local args = {}
for i = 2, #ARGV do args[i - 1] = ARGV[i] end
return fn(KEYS, args)
