-- The article's questions about the words table that need time arithmetic (MySQL, MariaDB).

-- Per partition: events, offsets, last activity, events a second, produce-to-insert latency
SELECT src_partition, COUNT(*) AS events, MIN(src_offset) AS min_offset,
       MAX(src_offset) AS max_offset, MAX(consumed_at) AS last_active,
       ROUND(COUNT(*) / GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(consumed_at), MAX(consumed_at)) / 1e6, 0.001), 1) AS events_per_sec,
       ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, produced_at, consumed_at)) / 1e6, 3) AS avg_latency_sec,
       ROUND(MAX(TIMESTAMPDIFF(MICROSECOND, produced_at, consumed_at)) / 1e6, 3) AS max_latency_sec
FROM words GROUP BY src_partition ORDER BY src_partition;

-- Throughput: events a second from the first insert to the last
SELECT COUNT(*) AS events,
       ROUND(COUNT(*) / GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(consumed_at), MAX(consumed_at)) / 1e6, 0.001), 1) AS events_per_sec
FROM words;
