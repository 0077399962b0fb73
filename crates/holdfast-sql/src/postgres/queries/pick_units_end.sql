-- The end of pick_units.sql, after its locking clause.
    ) AS u
)
