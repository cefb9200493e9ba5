-- The loader's position proves itself: with the next offset it keeps a fingerprint (hash of key and
-- value) of the last message it loaded. A later run reads that message back before anything else
-- and compares: a broker that lost our history and has since received other messages at the same
-- offsets is caught, not silently skipped past. Empty for positions written before this column.
ALTER TABLE routerscope.ingest_offsets
    ADD COLUMN IF NOT EXISTS last_fingerprint String DEFAULT '' AFTER rows_quarantined;
