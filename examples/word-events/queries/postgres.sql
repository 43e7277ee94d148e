-- The article's questions about the words table that need time arithmetic (PostgreSQL).

-- Per partition: events, offsets, last activity, events a second, produce-to-insert latency
SELECT src_partition, COUNT(*) AS events, MIN(src_offset) AS min_offset,
       MAX(src_offset) AS max_offset, MAX(consumed_at) AS last_active,
       ROUND((COUNT(*) / GREATEST(EXTRACT(EPOCH FROM MAX(consumed_at) - MIN(consumed_at)), 0.001))::numeric, 1) AS events_per_sec,
       ROUND(AVG(EXTRACT(EPOCH FROM consumed_at - produced_at))::numeric, 3) AS avg_latency_sec,
       ROUND(MAX(EXTRACT(EPOCH FROM consumed_at - produced_at))::numeric, 3) AS max_latency_sec
FROM words GROUP BY src_partition ORDER BY src_partition;

-- Throughput: events a second from the first insert to the last
SELECT COUNT(*) AS events,
       ROUND((COUNT(*) / GREATEST(EXTRACT(EPOCH FROM MAX(consumed_at) - MIN(consumed_at)), 0.001))::numeric, 1) AS events_per_sec
FROM words;
