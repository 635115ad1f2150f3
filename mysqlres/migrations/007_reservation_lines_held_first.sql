-- The held lines lead the position index: (held, shop, item, group) serves
-- a position's held sum as before (equality on all four), and the pod-wide
-- reads of the audit (every held line, grouped by position) become one
-- range over held = 1 in position order. Terminal reservations keep their
-- lines with held = 0 until their retention ends: no read of active holds
-- visits them. Same name and columns, so that rerunning the statement after
-- a crash between it and its record redefines the index to the same one
-- (MySQL 8.0 has no IF [NOT] EXISTS for indexes).
ALTER TABLE reservation_lines
  DROP KEY reservation_lines_position,
  ADD KEY reservation_lines_position (held, shop_id, inventory_item_id, inventory_group_id, quantity)
