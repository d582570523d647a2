-- Drives headless Neovim (0.11) against the real sparkls server: docs/editors.md's config, completion through
-- Neovim's own omnifunc and popup menu, a code action applied by Neovim, an inline completion request and
-- a cancelled one. Writes what it saw as JSON to $SPARKLS_NVIM_OUT; tests/e2e/test_editors.py checks it.
local out_path = assert(os.getenv('SPARKLS_NVIM_OUT'))
local file = assert(os.getenv('SPARKLS_NVIM_FILE'))
local init_options = vim.json.decode(assert(os.getenv('SPARKLS_NVIM_OPTIONS')))
local timeout = tonumber(os.getenv('SPARKLS_NVIM_TIMEOUT_MS') or '60000')
local result = { steps = {} }

-- the steps run in a coroutine that waits on Neovim's main loop (driver.lua)
local here = debug.getinfo(1, 'S').source:sub(2):match('^(.*/)') or './'
local driver = dofile(here .. 'driver.lua')(result, out_path, timeout, 20)
local step, wait_for = driver.step, driver.wait_for

local function keys(s)  -- typed as a user would: queued, then handled by the main loop
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(s, true, false, true), 'n', false)
  wait_for(function() return vim.fn.getchar(1) == 0 end)
end

local function lines() return vim.api.nvim_buf_get_lines(0, 0, -1, false) end

local function row_of(env)  -- the first line that contains the text in environment variable `env` (1-based)
  local needle = assert(os.getenv(env), env)
  for i, l in ipairs(lines()) do
    if l:find(needle, 1, true) then return i end
  end
  error(env .. ': no line contains ' .. needle)
end

-- The configuration for Neovim 0.11 in docs/editors.md.
vim.lsp.config('sparkls', {
  cmd = vim.json.decode(assert(os.getenv('SPARKLS_NVIM_CMD'))),
  filetypes = { 'python' },
  root_markers = { '.git', 'pyproject.toml' },
  init_options = init_options,
})
vim.lsp.enable('sparkls')

local client
step('attach', function()
  vim.cmd.edit(file)
  assert(wait_for(function()
    client = vim.lsp.get_clients({ bufnr = 0, name = 'sparkls' })[1]
    return client ~= nil and client.initialized
  end), 'sparkls did not attach')
  result.encoding = client.offset_encoding
  -- the model loads in the background: wait until the server says it is ready
  assert(wait_for(function()
    local r = client:request_sync('sparkls/health', {}, 5000, 0)
    result.health = r and r.result
    return r ~= nil and r.result ~= nil and r.result.ok
  end), 'the engine did not become ready')
end)

local function inline_params(row)
  return {
    textDocument = { uri = vim.uri_from_bufnr(0) },
    position = { line = row - 1, character = #vim.api.nvim_buf_get_lines(0, row - 1, row, false)[1] },
    context = { triggerKind = 1 },
  }
end

step('inline_completion', function()
  local row = row_of('SPARKLS_NVIM_COMPLETE_AT')
  local r = client:request_sync('textDocument/inlineCompletion', inline_params(row), timeout, 0)
  assert(r ~= nil and r.err == nil, 'inline completion failed: ' .. vim.inspect(r))
  local items = r.result.items or r.result
  result.inline_items = vim.tbl_map(function(i) return i.insertText end, items)
end)

-- Completion through Neovim's own completion (vim.lsp.completion, the omnifunc and the popup menu), accepted
-- with <C-y>.
step('completion', function()
  local row = row_of('SPARKLS_NVIM_COMPLETE_AT')
  vim.api.nvim_win_set_cursor(0, { row, 0 })
  result.before = lines()[row]
  -- Neovim's LSP completion: the omnifunc asks the server; on accepting, the item's whole textEdit is applied
  vim.lsp.completion.enable(true, client.id, 0, { autotrigger = false })
  vim.bo.omnifunc = 'v:lua.vim.lsp.omnifunc'
  vim.o.completeopt = 'menuone,noinsert'
  keys('A<C-x><C-o>')
  assert(wait_for(function() return vim.fn.pumvisible() == 1 end), 'no completion menu')
  result.completion_items = vim.tbl_map(function(i) return i.word end, vim.fn.complete_info({ 'items' }).items)
  -- accepting fires CompleteDone, where vim.lsp.completion's handler (registered before this one) applies the item;
  -- scheduled from here, `accepted` is set after that handler and after anything it scheduled
  local accepted = false
  vim.api.nvim_create_autocmd('CompleteDone', { buffer = 0, once = true, callback = function()
    vim.schedule(function() accepted = true end)
  end })
  keys('<C-y>')
  assert(wait_for(function() return accepted end), 'the completion was not accepted')
  keys('<Esc>')
  assert(wait_for(function() return vim.api.nvim_get_mode().mode == 'n' end), 'still in insert mode')
  result.after = table.concat(vim.api.nvim_buf_get_lines(0, row - 1, row + 2, false), '\n')
end)

-- A request cancelled by Neovim: Neovim swallows the server's RequestCancelled answer, so the server's own
-- metrics show whether the engine request was aborted; the server keeps serving.
local function engine_requests()  -- without background warm-ups, which may end at any time (as lsp_client.py)
  local r = client:request_sync('sparkls/metrics', {}, timeout, 0)
  local out = {}
  for _, e in ipairs(assert(r and r.result, 'no metrics').engine) do
    if not vim.startswith(e.requestId, 'warm-') then table.insert(out, e) end
  end
  return out
end

local function in_engine()  -- a suggestion runs and the engine holds its request (see tests/e2e/lsp_client.py)
  local r = client:request_sync('sparkls/health', {}, timeout, 0)
  local h = assert(r and r.result, 'no health')
  return h.server.suggestionJobs >= 1 and (h.stats.open_requests or 0) >= 1
end

step('cancel', function()
  local row = row_of('SPARKLS_NVIM_CANCEL_AT')
  local seen = {}
  for _, e in ipairs(engine_requests()) do seen[e.requestId] = true end
  local answered = false
  local ok, id = client:request('textDocument/inlineCompletion', inline_params(row), function() answered = true end, 0)
  assert(ok, 'request not sent')
  assert(wait_for(in_engine), 'the request did not reach the engine')
  client:cancel_request(id)
  local t0 = vim.uv.hrtime()
  local aborted
  assert(wait_for(function()
    for _, e in ipairs(engine_requests()) do
      if not seen[e.requestId] then aborted = e end
    end
    return aborted ~= nil
  end), 'the engine request did not end')
  result.cancel_ms = (vim.uv.hrtime() - t0) / 1e6
  result.cancel_finish_reason = aborted.finish_reason
  result.cancel_answered_with_result = answered
  local r = client:request_sync('sparkls/health', {}, timeout, 0)
  result.serving_after_cancel = r ~= nil and r.result ~= nil and r.result.ok
end)

-- A code action listed by the server and applied by Neovim (its command streams the edit back with
-- workspace/applyEdit, which Neovim applies).
step('code_action', function()
  local row = row_of('SPARKLS_NVIM_ACTION_AT')
  local title = assert(os.getenv('SPARKLS_NVIM_ACTION'))
  vim.api.nvim_win_set_cursor(0, { row, 4 })
  local tick = vim.b.changedtick
  result.action_before = table.concat(lines(), '\n')
  local offered = {}
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(a)
      offered[#offered + 1] = a.title
      return a.title:find(title, 1, true) ~= nil
    end,
  })
  assert(wait_for(function() return vim.b.changedtick ~= tick end), 'the action changed nothing')
  -- the edit has finished when Neovim has no request pending: its command (`workspace/executeCommand`, whose
  -- edits come as `workspace/applyEdit`, applied before they are answered) or `codeAction/resolve` is answered
  assert(wait_for(function()
    for _, r in pairs(client.requests) do
      if r.type == 'pending' then return false end
    end
    return true
  end), 'the action did not finish')
  result.actions = offered
  result.action_after = table.concat(lines(), '\n')
end)

driver.run()
