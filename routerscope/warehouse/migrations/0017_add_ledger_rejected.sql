-- The ledger only ever inserts. A message the warehouse refused as a fact (quarantined with
-- `insert.rejected`) may already have its ledger row, written by the insert's ledger view before the
-- facts view refused the block; the loader writes the same Kafka coordinates again with rejected = 1,
-- which the table (ReplacingMergeTree without a version: the last inserted row of a key wins) folds
-- over it. This replaces a DELETE, a mutation on the ingest path: cut short by a full disk it left a
-- 0-byte mutation file and a warehouse that could not attach the table again.
-- Read with FINAL and `NOT rejected`.
ALTER TABLE routerscope.loaded_messages
    ADD COLUMN IF NOT EXISTS rejected UInt8 DEFAULT 0 AFTER loaded_at;
