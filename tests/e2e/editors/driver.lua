-- What the Neovim driver scripts (neovim.lua, neovim_nextedit.lua) share: the result written as JSON to the out
-- path, the steps, waiting in a coroutine, and the loop that runs the steps. A script loads it with
--   local driver = dofile(<this folder> .. 'driver.lua')(result, out_path, timeout_ms, poll_ms)
-- `result` gets `steps` (each step's name, ok and error) and `done`; waits last `timeout_ms` unless told otherwise
-- and look again every `poll_ms`.
return function(result, out_path, timeout, poll_ms)
  local driver = {}

  function driver.save()
    local f = assert(io.open(out_path, 'w'))
    f:write(vim.json.encode(result))
    f:close()
  end

  local steps = {}
  function driver.step(name, fn) steps[#steps + 1] = { name = name, fn = fn } end

  -- The steps run in a coroutine that yields to Neovim's main loop while it waits, so typed keys, insert mode,
  -- autocommands, timers and the server's answers all happen as they would for a user.
  function driver.wait_for(cond, ms)
    local co = coroutine.running()
    local deadline = vim.uv.now() + (ms or timeout)
    while not cond() do
      if vim.uv.now() > deadline then return false end
      vim.defer_fn(function() coroutine.resume(co) end, poll_ms)
      coroutine.yield()
    end
    return true
  end

  -- Runs the steps in order, saving the result after each (`stop_on_failure`: none after one that failed), then
  -- marks it done and quits Neovim.
  function driver.run(stop_on_failure)
    coroutine.resume(coroutine.create(function()
      for _, s in ipairs(steps) do
        local ok, err = pcall(s.fn)
        result.steps[#result.steps + 1] = { name = s.name, ok = ok, error = ok and vim.NIL or tostring(err) }
        driver.save()
        if stop_on_failure and not ok then break end
      end
      result.done = true
      driver.save()
      vim.cmd('qall!')
    end))
  end

  return driver
end
