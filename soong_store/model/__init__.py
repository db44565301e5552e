"""The pure model: ids, enums, the JSON codec, content blocks and the records handed to callers."""
