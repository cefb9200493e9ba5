-- The serve-time answer checks on the decision event (contract v2, optional; docs/router.md, "Only a declared
-- answer is served"): answer_check, the first check an answer of the request failed (labels, fields, tools,
-- language, format), and device_input_tokens, the input's size the router judged the device's window by. NULL
-- when the event does not carry them (every answer passed; no personal-data window judged; v1).
ALTER TABLE routerscope.decisions
    ADD COLUMN IF NOT EXISTS answer_check LowCardinality(Nullable(String)) AFTER assignment_bucket,
    ADD COLUMN IF NOT EXISTS device_input_tokens Nullable(UInt32) AFTER answer_check;
