"""The rules the store keeps, as pure functions of plain values: rows, sessions, the tree."""
