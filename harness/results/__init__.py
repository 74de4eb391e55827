"""What a run leaves behind and how it is read: the result schema and its versions (`schema`), the one reader of
every versioned file (`formats`), atomic writes and migrating reads (`store`), and the environment fingerprint that
decides what may be compared (`env`)."""
