-- The article's questions about the words table in SQL that every database takes
-- (report.py runs these after the database's own file).

-- Duplicates: rows beyond one per event (the article saw 47 after a bounce)
SELECT COUNT(*) - COUNT(DISTINCT event_uid) AS duplicates FROM words;

-- Missing: uids between the first and the last that are not in the table
SELECT COALESCE(MAX(event_uid) - MIN(event_uid) + 1 - COUNT(DISTINCT event_uid), 0) AS missing FROM words;

-- Out of sequence: events whose next uid is not in the table (the article's OutOfSeqUID)
SELECT COUNT(*) AS out_of_sequence FROM words w
WHERE w.event_uid < (SELECT MAX(event_uid) FROM words)
  AND NOT EXISTS (SELECT 1 FROM words n WHERE n.event_uid = w.event_uid + 1);

-- The last ten events
SELECT event_uid, word, src_partition, src_offset, produced_at, consumed_at
FROM words ORDER BY event_uid DESC LIMIT 10;
