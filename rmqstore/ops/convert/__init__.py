"""``convert``: the same store in another layout, written as a new store beside it (one module per kind of
conversion: :mod:`.cq` for the consume queue layout)."""
