-- The bytes dump_batches.lua and dump_islands.lua write for a batch (x, y of a text
-- loader, T its ctx): each row's T inputs, then its last target, T + 1 bytes a row.
-- Returns the bytes and the rows.  Load it with dofile (the two scripts find it beside
-- themselves, from arg[0]).
return function(x, y, T)
  local xs, ys = x:tolist(), y:tolist()
  local parts = {}
  for b = 1, #xs do
    local row = {}
    for t = 1, T do row[t] = string.char(math.tointeger(xs[b][t])) end
    row[T + 1] = string.char(math.tointeger(ys[b][T]))
    parts[b] = table.concat(row)
  end
  return table.concat(parts), #xs
end
