"""When each of two consumers joining a new group at the same moment gets its partitions.

Shows the test broker's group join without sluice (docs/performance.md, "Why two tasks
looked slower"): on Tansu 0.6.0 the second member is answered about 3 s after the first.
Uses the examples' Python (confluent-kafka, librdkafka 2.16):

    tansu broker --listener-url tcp://127.0.0.1:19092 \\
        --advertised-listener-url tcp://127.0.0.1:19092 --storage-engine memory://tansu/ &
    target/examples-venv/bin/python host/benches/pipeline/group_join.py 127.0.0.1:19092 [HEARTBEAT_MS]
"""

import sys
import threading
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    bootstrap = sys.argv[1]
    heartbeat = sys.argv[2] if len(sys.argv) > 2 else "3000"
    topic = "join-" + uuid.uuid4().hex[:8]
    group = "join-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 4, 1)]).values():
        future.result()
    start = time.monotonic()

    def member(i: int) -> None:
        consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"member-{i}",
            "heartbeat.interval.ms": heartbeat,
        })

        def assigned(_consumer, partitions) -> None:
            print(f"{time.monotonic() - start:6.3f} s  member {i} assigned "
                  f"{[p.partition for p in partitions]}", flush=True)

        consumer.subscribe([topic], on_assign=assigned)
        end = time.monotonic() + 8
        while time.monotonic() < end:
            consumer.poll(0.05)
        consumer.close()

    members = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for m in members:
        m.start()
    for m in members:
        m.join()


if __name__ == "__main__":
    main()
