-- The article's questions about the words table that need time arithmetic (SQLite).

-- Per partition: events, offsets, last activity, events a second, produce-to-insert latency
SELECT src_partition, COUNT(*) AS events, MIN(src_offset) AS min_offset,
       MAX(src_offset) AS max_offset, MAX(consumed_at) AS last_active,
       ROUND(COUNT(*) / MAX((julianday(MAX(consumed_at)) - julianday(MIN(consumed_at))) * 86400.0, 0.001), 1) AS events_per_sec,
       ROUND(AVG((julianday(consumed_at) - julianday(produced_at)) * 86400.0), 3) AS avg_latency_sec,
       ROUND(MAX((julianday(consumed_at) - julianday(produced_at)) * 86400.0), 3) AS max_latency_sec
FROM words GROUP BY src_partition ORDER BY src_partition;

-- Throughput: events a second from the first insert to the last
SELECT COUNT(*) AS events,
       ROUND(COUNT(*) / MAX((julianday(MAX(consumed_at)) - julianday(MIN(consumed_at))) * 86400.0, 0.001), 1) AS events_per_sec
FROM words;
