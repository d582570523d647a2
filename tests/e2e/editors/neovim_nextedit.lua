-- Drives headless Neovim (0.11) with the plugin in editors/nvim against the real sparkls server: an edit the
-- server predicts a follow-up for, the prediction shown as extmarks and applied with Tab, a second one dismissed
-- with Escape in insert mode, and an answer that comes after the buffer changed. Writes what it saw as JSON to
-- $SPARKLS_NVIM_OUT; tests/e2e/test_editors.py checks it.
local api = vim.api
local out_path = assert(os.getenv('SPARKLS_NVIM_OUT'))
local timeout = tonumber(os.getenv('SPARKLS_NVIM_TIMEOUT_MS') or '10000')  -- each step's wait
local start_timeout = tonumber(os.getenv('SPARKLS_NVIM_START_MS') or '40000')  -- the server's start
local result = { steps = {}, notified = {}, events = {}, requests = {}, executed = 0 }

-- the steps run in a coroutine that waits on Neovim's main loop (driver.lua)
local here = debug.getinfo(1, 'S').source:sub(2):match('^(.*/)') or './'
local driver = dofile(here .. 'driver.lua')(result, out_path, timeout, 10)
local step, wait_for = driver.step, driver.wait_for

local function keys(s, remap)  -- typed as a user would; `remap`: buffer mappings (the plugin's Tab/Escape) apply
  api.nvim_feedkeys(api.nvim_replace_termcodes(s, true, false, true), remap and 'mt' or 'nt', false)
  wait_for(function() return vim.fn.getchar(1) == 0 end)
end

local function text() return table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n') .. '\n' end

vim.opt.runtimepath:prepend(assert(os.getenv('SPARKLS_NVIM_PLUGIN')))
local nextedit = require('sparkls.nextedit')
nextedit.setup({ debounce_ms = 100 })

-- The configuration for Neovim 0.11 in docs/editors.md.
vim.lsp.config('sparkls', {
  cmd = vim.json.decode(assert(os.getenv('SPARKLS_NVIM_CMD'))),
  filetypes = { 'python' },
  root_markers = { '.git', 'pyproject.toml' },
  init_options = vim.json.decode(assert(os.getenv('SPARKLS_NVIM_OPTIONS'))),
})
vim.lsp.enable('sparkls')

-- What the plugin did (its User events), what it told the server, and each inlineEdit request's fate.
api.nvim_create_autocmd('User', { pattern = 'SparklsNextEdit', callback = function(args)
  result.events[#result.events + 1] = { event = args.data.event, request_id = args.data.request_id or vim.NIL }
end })
api.nvim_create_autocmd('LspNotify', { callback = function(args)
  if args.data.method == 'sparkls/acceptance' then result.notified[#result.notified + 1] = args.data.params end
end })
api.nvim_create_autocmd('LspRequest', { callback = function(args)
  local r = args.data.request
  if r.method == 'sparkls/inlineEdit' then
    result.requests[#result.requests + 1] = { id = args.data.request_id, type = r.type }
  elseif r.method == 'workspace/executeCommand' and r.type == 'pending' then
    result.executed = (result.executed or 0) + 1
  end
end })

-- The extmarks in the plugin's namespace, read back as Neovim holds them.
local function marks()
  local ns = api.nvim_get_namespaces()['sparkls.nextedit']
  local found = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
    local d = m[4]
    local function chunks(list) return table.concat(vim.tbl_map(function(c) return c[1] end, list)) end
    found[#found + 1] = {
      row = m[2], col = m[3], end_row = d.end_row or vim.NIL, end_col = d.end_col or vim.NIL,
      hl_group = d.hl_group or vim.NIL, virt_text = d.virt_text and chunks(d.virt_text) or vim.NIL,
      virt_text_pos = d.virt_text_pos or vim.NIL,
      virt_lines = d.virt_lines and vim.tbl_map(chunks, d.virt_lines) or vim.NIL,
      virt_lines_above = d.virt_lines_above or false,
    }
  end
  return found
end

local function next_event(after)  -- the first plugin event after the first `after` ones
  assert(wait_for(function() return #result.events > after end), 'the plugin reported nothing')
  return result.events[after + 1].event
end

-- Whether a prediction is shown after the first `after` events (on a busy machine, an empty answer to a request
-- sent while keys were still being typed may come first).
local function shown_after(after)
  return wait_for(function()
    for i = after + 1, #result.events do
      if result.events[i].event == 'shown' then return true end
    end
    return false
  end)
end

local function tab_desc(mode) return vim.fn.maparg('<Tab>', mode, false, true).desc or vim.NIL end

local client
step('attach', function()
  vim.cmd.edit(assert(os.getenv('SPARKLS_NVIM_FILE')))
  assert(wait_for(function()
    client = vim.lsp.get_clients({ bufnr = 0, name = 'sparkls' })[1]
    return client ~= nil and client.initialized
  end, start_timeout), 'sparkls did not attach')
  assert(wait_for(function()
    local r = client:request_sync('sparkls/health', {}, 5000, 0)
    return r ~= nil and r.result ~= nil and r.result.ok
  end, start_timeout), 'the engine did not become ready')
  -- the user's own insert-mode Tab: hidden while a prediction is shown, back afterwards
  vim.keymap.set('i', '<Tab>', '<Tab>', { buffer = 0, desc = 'user tab' })
end)

-- The user renames the first call; the server predicts the same rename on the other two; Tab applies it.
step('accept', function()
  local seen = #result.events
  keys('gg0f(i_v2<Esc>')
  result.typed = text()
  assert(shown_after(seen), 'no prediction shown: ' .. vim.inspect(result.events))
  result.accept_marks = marks()
  result.tab_while_shown = { n = tab_desc('n'), i = tab_desc('i') }
  result.accept_command = nextedit.shown().command or vim.NIL  -- run on accept when the server sends one
  seen = #result.events
  keys('<Tab>', true)
  assert(wait_for(function() return text() ~= result.typed end), 'Tab changed nothing')
  result.accepted = text()
  result.accept_event = result.events[seen + 1].event
  result.marks_after_accept = marks()
  result.tab_after_accept = { n = tab_desc('n'), i = tab_desc('i') }
  -- the applied edit is an edit: the plugin asks again (the buffer now is the prediction: nothing to show)
  result.after_accept_event = next_event(seen + 1)
end)

-- The user starts another change; a prediction comes while they are in insert mode; Escape dismisses it and
-- leaves insert mode.
step('dismiss', function()
  local seen = #result.events
  api.nvim_win_set_cursor(0, { 7, 4 })
  keys('cwlog')
  result.typed2 = text()
  assert(shown_after(seen), 'no second prediction: ' .. vim.inspect(result.events))
  result.dismiss_marks = marks()
  result.mode_while_shown = api.nvim_get_mode().mode
  result.tab_while_shown2 = tab_desc('i')
  seen = #result.events
  keys('<Esc>', true)
  assert(wait_for(function() return api.nvim_get_mode().mode == 'n' and #marks() == 0 end), 'not dismissed')
  result.dismiss_event = result.events[seen + 1] and result.events[seen + 1].event or vim.NIL
  result.dismissed = text()
  result.tab_after_dismiss = tab_desc('i')
end)

-- Two requests in a row (the first is cancelled), then the buffer changes before the answer comes: it is
-- stale, and never shown.
step('stale', function()
  local seen, asked = #result.events, #result.requests
  result.sent = { nextedit.request(), nextedit.request() }
  api.nvim_buf_set_lines(0, -1, -1, false, { '# end' })
  result.stale_requests = vim.list_slice(result.requests, asked + 1)
  assert(wait_for(function()
    for i = seen + 1, #result.events do
      if result.events[i].event == 'stale' then return true end
    end
    return false
  end), 'no stale answer: ' .. vim.inspect(result.events))
  result.stale_events = vim.tbl_map(function(e) return e.event end, vim.list_slice(result.events, seen + 1))
  result.stale_marks = marks()
  result.stale_text = text()
  local r = client:request_sync('sparkls/health', {}, 5000, 0)
  result.serving_after = r ~= nil and r.result ~= nil and r.result.ok
end)

driver.run(true)  -- no step after one that failed
