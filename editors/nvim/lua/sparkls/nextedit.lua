-- sparkls' predicted next edit in Neovim (0.11+): asked for (`sparkls/inlineEdit`) when typing pauses, shown
-- with extmarks (removed text highlighted, added text as virtual text), Tab applies it, Escape dismisses it.
--
--   require('sparkls.nextedit').setup({ debounce_ms = 500 })
--
-- attaches to every buffer a client named `sparkls` attaches to (`vim.lsp.enable('sparkls')` or any other way).
-- Each buffer has its own state: timer, request in flight, prediction shown, key mappings while it is shown.
local api = vim.api

local M = {}

local defaults = {
  client_name = 'sparkls', -- attach to clients of this name
  auto = true, -- ask by itself when typing pauses; false: only `request()`
  debounce_ms = 500, -- how long the buffer must rest before asking
  events = { 'TextChanged', 'TextChangedI', 'CursorHold', 'CursorHoldI' }, -- what starts the wait
  keys = { accept = '<Tab>', dismiss = '<Esc>' }, -- mapped (buffer-local) only while a prediction is shown
}

local config = vim.deepcopy(defaults)

M.ns = api.nvim_create_namespace('sparkls.nextedit')
M.hl_delete = 'SparklsNextEditDelete' -- removed text: DiffDelete's background, struck through
M.hl_add = 'SparklsNextEditAdd' -- added text (linked to DiffAdd)

---@class sparkls.nextedit.Pending
---@field id integer? the LSP request id
---@field client_id integer
---@field version integer the buffer version it was asked for
---@field row integer the cursor's row (0-based)

---@class sparkls.nextedit.Shown
---@field client_id integer
---@field version integer
---@field request_id string?
---@field edits table[] the LSP TextEdits
---@field command table? an LSP Command to run on accept
---@field first integer rows the prediction spans (with the cursor's); moving outside dismisses it
---@field last integer
---@field maps table[] the mappings made while shown, and the user's buffer-local ones they hid

---@class sparkls.nextedit.Buffer
---@field client_id integer
---@field group integer its autocommands
---@field timer uv.uv_timer_t
---@field pending sparkls.nextedit.Pending?
---@field shown sparkls.nextedit.Shown?
---@field asked string? the version and cursor last asked for (a pause there asks once)
---@field quiet integer? the version a prediction was dismissed at: no asking by itself until the buffer changes

---@type table<integer, sparkls.nextedit.Buffer>
local buffers = {}

local function resolve(bufnr)
  return (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
end

local function version_of(bufnr)
  return vim.lsp.util.buf_versions[bufnr]
end

local function emit(bufnr, event, request_id)
  api.nvim_exec_autocmds('User', {
    pattern = 'SparklsNextEdit',
    modeline = false,
    data = { buf = bufnr, event = event, request_id = request_id },
  })
end

local function define_highlights()
  local del = api.nvim_get_hl(0, { name = 'DiffDelete', link = false })
  api.nvim_set_hl(0, M.hl_delete, { default = true, strikethrough = true, bg = del.bg, ctermbg = del.ctermbg })
  api.nvim_set_hl(0, M.hl_add, { default = true, link = 'DiffAdd' })
end

--- Tells the server what became of a prediction (`shown`, `dismissed`); a server without a handler ignores it.
local function acceptance(client, request_id, event)
  if type(request_id) == 'string' then
    client:notify('sparkls/acceptance', { requestId = request_id, event = event })
  end
end

-- An LSP position as a (row, byte column) that exists in the buffer (a position past the end is its end).
local function place(bufnr, position, encoding)
  local count = api.nvim_buf_line_count(bufnr)
  if position.line >= count then
    local last = api.nvim_buf_get_lines(bufnr, count - 1, count, false)[1] or ''
    return count - 1, #last, true
  end
  local line = api.nvim_buf_get_lines(bufnr, position.line, position.line + 1, false)[1] or ''
  return position.line, vim.str_byteindex(line, encoding, position.character, false), false
end

local function virt_lines(lines)
  return vim.tbl_map(function(l) return { { l, M.hl_add } } end, lines)
end

-- The extmarks for one edit: what it removes highlighted; what it adds inline (same line) or as virtual lines.
local function render(bufnr, edit, encoding)
  local srow, scol = place(bufnr, edit.range.start, encoding)
  local erow, ecol, past_end = place(bufnr, edit.range['end'], encoding)
  if srow ~= erow or scol ~= ecol then
    api.nvim_buf_set_extmark(bufnr, M.ns, srow, scol, { end_row = erow, end_col = ecol, hl_group = M.hl_delete,
      strict = false })
  end
  if edit.newText == '' then return end
  local parts = vim.split(edit.newText, '\n', { plain = true })
  if #parts == 1 then
    api.nvim_buf_set_extmark(bufnr, M.ns, erow, ecol, { virt_text = { { parts[1], M.hl_add } },
      virt_text_pos = 'inline' })
    return
  end
  if parts[#parts] == '' then table.remove(parts) end
  if edit.range['end'].character == 0 and not past_end and edit.newText:sub(-1) == '\n' then
    -- whole lines added before a line: shown above it
    api.nvim_buf_set_extmark(bufnr, M.ns, erow, 0, { virt_lines = virt_lines(parts), virt_lines_above = true })
    return
  end
  local first = past_end and '' or table.remove(parts, 1)
  if first ~= '' then
    api.nvim_buf_set_extmark(bufnr, M.ns, erow, ecol, { virt_text = { { first, M.hl_add } },
      virt_text_pos = 'inline' })
  end
  if #parts > 0 then
    api.nvim_buf_set_extmark(bufnr, M.ns, erow, 0, { virt_lines = virt_lines(parts) })
  end
end

local function feed(lhs)  -- the key as if the mapping were not there: the user's own mapping, or Neovim's
  api.nvim_feedkeys(api.nvim_replace_termcodes(lhs, true, true, true), 'mi', false)
end

local function map_keys(bufnr, shown)
  local actions = {
    { config.keys.accept, 'accept', function() if not M.accept(bufnr) then feed(config.keys.accept) end end },
    { config.keys.dismiss, 'dismiss', function() M.dismiss(bufnr); feed(config.keys.dismiss) end },
  }
  api.nvim_buf_call(bufnr, function()
    for _, a in ipairs(actions) do
      for _, mode in ipairs({ 'n', 'i' }) do
        if a[1] then
          local theirs = vim.fn.maparg(a[1], mode, false, true)
          shown.maps[#shown.maps + 1] = { mode = mode, lhs = a[1], theirs = theirs.buffer == 1 and theirs or nil }
          vim.keymap.set(mode, a[1], a[3], { buffer = bufnr, nowait = true, silent = true,
            desc = 'sparkls: ' .. a[2] .. ' the predicted edit' })
        end
      end
    end
  end)
end

local function unmap_keys(bufnr, shown)
  if not api.nvim_buf_is_valid(bufnr) then return end
  api.nvim_buf_call(bufnr, function()
    for _, m in ipairs(shown.maps) do
      pcall(vim.keymap.del, m.mode, m.lhs, { buffer = bufnr })
      if m.theirs then vim.fn.mapset(m.mode, false, m.theirs) end
    end
  end)
end

-- Takes the shown prediction off the buffer; `event` (dismissed) is reported to the server and to `User` autocmds.
local function hide(bufnr, event)
  local st = buffers[bufnr]
  local shown = st and st.shown
  if not shown then return nil end
  st.shown = nil
  if api.nvim_buf_is_valid(bufnr) then api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1) end
  unmap_keys(bufnr, shown)
  if event == 'dismissed' then st.quiet = shown.version end
  if event then
    local client = vim.lsp.get_client_by_id(shown.client_id)
    if client then acceptance(client, shown.request_id, event) end
    emit(bufnr, event, shown.request_id)
  end
  return shown
end

local function show(bufnr, pending, result)
  local client = assert(vim.lsp.get_client_by_id(pending.client_id))
  hide(bufnr, 'dismissed')
  local first, last = pending.row, pending.row
  for _, e in ipairs(result.edits) do
    render(bufnr, e, client.offset_encoding)
    first = math.min(first, e.range.start.line)
    last = math.max(last, e.range['end'].line)
  end
  local request_id = type(result.requestId) == 'string' and result.requestId or nil
  local shown = { client_id = client.id, version = pending.version, request_id = request_id, edits = result.edits,
    command = type(result.command) == 'table' and result.command or nil, first = first, last = last, maps = {} }
  buffers[bufnr].shown = shown
  map_keys(bufnr, shown)
  acceptance(client, request_id, 'shown')
  emit(bufnr, 'shown', request_id)
end

-- The server's answer: shown only when it is the newest request's and for the buffer as it is now.
local function answered(bufnr, pending, err, result)
  local st = buffers[bufnr]
  local request_id = type(result) == 'table' and type(result.requestId) == 'string' and result.requestId or nil
  if not st or st.pending ~= pending then return emit(bufnr, 'cancelled', request_id) end
  st.pending = nil
  if err or type(result) ~= 'table' then return emit(bufnr, 'failed', request_id) end
  local doc = result.textDocument or {}
  local now = version_of(bufnr)
  if doc.version ~= now or pending.version ~= now or doc.uri ~= vim.uri_from_bufnr(bufnr) then
    return emit(bufnr, 'stale', request_id)
  end
  if type(result.edits) ~= 'table' or #result.edits == 0 then return emit(bufnr, 'empty', request_id) end
  if api.nvim_get_current_buf() ~= bufnr then return emit(bufnr, 'stale', request_id) end
  show(bufnr, pending, result)
end

--- Asks for the next edit at the cursor of `bufnr` (default: the current buffer), cancelling one in flight.
--- @return boolean sent
function M.request(bufnr)
  bufnr = resolve(bufnr)
  local st = buffers[bufnr]
  local client = st and vim.lsp.get_client_by_id(st.client_id)
  if not client or api.nvim_get_current_buf() ~= bufnr then return false end
  if st.pending then
    if st.pending.id then client:cancel_request(st.pending.id) end
    st.pending = nil
  end
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local line = api.nvim_buf_get_lines(bufnr, row - 1, row, false)[1] or ''
  local version = version_of(bufnr)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr), version = version },
    position = { line = row - 1, character = vim.str_utfindex(line, client.offset_encoding, col, false) },
  }
  st.asked = ('%d:%d:%d'):format(version, row, col)
  local pending = { client_id = client.id, version = version, row = row - 1 }
  local ok, id = client:request('sparkls/inlineEdit', params, function(err, result)
    answered(bufnr, pending, err, result)
  end, bufnr)
  if not ok then return false end
  pending.id = id
  st.pending = pending
  return true
end

--- Applies the shown prediction (if it is for the buffer as it is), and runs its command.
--- @return boolean applied
function M.accept(bufnr)
  bufnr = resolve(bufnr)
  local st = buffers[bufnr]
  if not (st and st.shown) then return false end
  local client = vim.lsp.get_client_by_id(st.shown.client_id)
  if not client or st.shown.version ~= version_of(bufnr) then
    hide(bufnr, 'dismissed')
    return false
  end
  local shown = hide(bufnr, nil) --[[@as sparkls.nextedit.Shown]]
  vim.lsp.util.apply_text_edits(shown.edits, bufnr, client.offset_encoding)
  local cmd = shown.command
  if cmd then
    if client.commands[cmd.command] or vim.lsp.commands[cmd.command] then
      client:exec_cmd(cmd, { bufnr = bufnr })
    else
      client:request('workspace/executeCommand', { command = cmd.command, arguments = cmd.arguments },
        function() end, bufnr)
    end
  end
  emit(bufnr, 'accepted', shown.request_id)
  return true
end

--- Takes the shown prediction away.
--- @return boolean dismissed whether one was shown
function M.dismiss(bufnr)
  return hide(resolve(bufnr), 'dismissed') ~= nil
end

--- The prediction shown in `bufnr`, if any: { request_id, version, edits, command }.
function M.shown(bufnr)
  local st = buffers[resolve(bufnr)]
  return st and st.shown
end

-- A pause in typing (the timer ran out): ask, unless a prediction is shown or this place was just asked about.
local function paused(bufnr)
  local st = buffers[bufnr]
  if not st or st.shown or st.quiet == version_of(bufnr) or api.nvim_get_current_buf() ~= bufnr then return end
  local mode = api.nvim_get_mode().mode
  if mode ~= 'n' and mode ~= 'i' then return end
  local row, col = unpack(api.nvim_win_get_cursor(0))
  if st.asked == ('%d:%d:%d'):format(version_of(bufnr), row, col) then return end
  M.request(bufnr)
end

--- Starts predicting in `bufnr` with the client `client_id` (setup() does it on LspAttach).
function M.attach(bufnr, client_id)
  bufnr = resolve(bufnr)
  if buffers[bufnr] then
    if buffers[bufnr].client_id == client_id then return end
    M.detach(bufnr)
  end
  local group = api.nvim_create_augroup('sparkls.nextedit.' .. bufnr, { clear = true })
  local st = { client_id = client_id, group = group, timer = assert(vim.uv.new_timer()) }
  buffers[bufnr] = st
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI', 'TextChangedP' }, { group = group, buffer = bufnr,
    callback = function() hide(bufnr, 'dismissed') end })
  api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI' }, { group = group, buffer = bufnr, callback = function()
    local shown = st.shown
    local row = api.nvim_win_get_cursor(0)[1] - 1
    if shown and (row < shown.first or row > shown.last) then hide(bufnr, 'dismissed') end
  end })
  api.nvim_create_autocmd('BufLeave', { group = group, buffer = bufnr,
    callback = function() hide(bufnr, 'dismissed') end })
  api.nvim_create_autocmd({ 'BufUnload', 'BufWipeout' }, { group = group, buffer = bufnr,
    callback = function() M.detach(bufnr) end })
  if config.auto and #config.events > 0 then
    api.nvim_create_autocmd(config.events, { group = group, buffer = bufnr, callback = function()
      st.timer:stop()
      st.timer:start(config.debounce_ms, 0, vim.schedule_wrap(function() paused(bufnr) end))
    end })
  end
end

--- Stops predicting in `bufnr`: the request in flight is cancelled, the prediction taken away.
function M.detach(bufnr)
  bufnr = resolve(bufnr)
  local st = buffers[bufnr]
  if not st then return end
  hide(bufnr, 'dismissed')
  buffers[bufnr] = nil
  local client = vim.lsp.get_client_by_id(st.client_id)
  if st.pending and st.pending.id and client then pcall(client.cancel_request, client, st.pending.id) end
  st.timer:stop()
  if not st.timer:is_closing() then st.timer:close() end
  pcall(api.nvim_del_augroup_by_id, st.group)
end

--- Configures the plugin and attaches to the clients named `client_name`, now and whenever one attaches.
function M.setup(opts)
  config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  if opts and opts.events then config.events = opts.events end  -- a list replaces, it does not merge
  define_highlights()
  local group = api.nvim_create_augroup('sparkls.nextedit', { clear = true })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = define_highlights })
  api.nvim_create_autocmd('LspAttach', { group = group, callback = function(args)
    local client = vim.lsp.get_client_by_id(args.data.client_id)
    if client and client.name == config.client_name then M.attach(args.buf, client.id) end
  end })
  api.nvim_create_autocmd('LspDetach', { group = group, callback = function(args)
    local st = buffers[args.buf]
    if st and st.client_id == args.data.client_id then M.detach(args.buf) end
  end })
  for _, client in ipairs(vim.lsp.get_clients({ name = config.client_name })) do
    for bufnr in pairs(client.attached_buffers) do M.attach(bufnr, client.id) end
  end
  api.nvim_create_user_command('SparklsNextEdit', function(cmd)
    local fn = ({ request = M.request, accept = M.accept, dismiss = M.dismiss })[cmd.args]
    if not fn then return vim.notify('SparklsNextEdit request|accept|dismiss', vim.log.levels.ERROR) end
    fn(0)
  end, { nargs = 1, complete = function() return { 'request', 'accept', 'dismiss' } end,
    desc = 'sparkls: ask for, accept or dismiss the predicted next edit' })
end

return M
