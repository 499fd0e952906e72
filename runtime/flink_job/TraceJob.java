package daedalus.flink;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;
import org.apache.flink.util.Collector;

/**
 * The streaming job Daedalus scales on a local Flink: trace source → keyBy → keyed aggregation with a fixed CPU
 * cost per record → exactly-once file sink.
 *
 * <p>Arguments: {@code --trace FILE} (records per second, one whole number per line), {@code --start-ms EPOCH_MS}
 * (when the trace's first second starts), {@code --output DIR}, optional {@code --name NAME} (the job's name, the
 * {@code job_name} label of its metrics), {@code --splits K} (default 12: even shares for 1, 2, 3, 4 readers),
 * {@code --keys N} (default 128), {@code --work-us MICROS} (CPU time each record costs, default 1000),
 * {@code --bottleneck-us MICROS} (default 0: none): a non-parallel stage {@code aggregate} after {@code work}, at
 * parallelism 1 and maximum parallelism 1, that waits this long on every record (a synchronous write to a slow
 * external store) and so processes at most about 1e6 / MICROS records per second however many workers the job has:
 * a stage that cannot scale out. It is a task of its own (never chained): chained to {@code work} at parallelism 1
 * its wait would be paid by {@code work}'s thread too, so one worker would run slower than the stage's rate and a
 * scale-out, which unchains them, would buy real capacity. Wall time, not CPU time: on shared cores a stage that
 * burns CPU gets faster when a scale-out spreads its neighbours over other processes.
 *
 * <p>{@code --plan P} prints the job graph at parallelism P instead of running it, one task a line: its name, its
 * parallelism and its maximum parallelism, tab-separated (what Flink's scheduler will run, chaining included).
 *
 * <p>The sink writes one line per record, {@code id,count} (the record's id and its key's running count), into
 * part files it commits when a checkpoint completes; in-progress files are hidden ({@code .part-…}) until then.
 * Counting the ids of the committed files is the exactly-once check.
 */
public final class TraceJob {
    private TraceJob() {
    }

    public static void main(String[] args) throws Exception {
        String traceFile = null;
        String output = null;
        String name = "daedalus-trace";
        long startMs = -1;
        int splits = 12;
        int keys = 128;
        long workMicros = 1000;
        long bottleneckMicros = 0;
        int plan = 0;
        for (int i = 0; i + 1 < args.length; i += 2) {
            String value = args[i + 1];
            switch (args[i]) {
                case "--trace" -> traceFile = value;
                case "--start-ms" -> startMs = Long.parseLong(value);
                case "--output" -> output = value;
                case "--name" -> name = value;
                case "--splits" -> splits = Integer.parseInt(value);
                case "--keys" -> keys = Integer.parseInt(value);
                case "--work-us" -> workMicros = Long.parseLong(value);
                case "--bottleneck-us" -> bottleneckMicros = Long.parseLong(value);
                case "--plan" -> plan = Integer.parseInt(value);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (traceFile == null || output == null || startMs < 0) {
            throw new IllegalArgumentException("--trace FILE, --start-ms EPOCH_MS and --output DIR are required");
        }
        Trace trace = new Trace(startMs, readRates(traceFile));

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        if (plan > 0) {
            env.setParallelism(plan);
        }
        final int keyCount = keys;
        FileSink<String> sink = FileSink.forRowFormat(new Path(output), new SimpleStringEncoder<String>("UTF-8"))
                .withBucketAssigner(new BasePathBucketAssigner<>())
                .withRollingPolicy(OnCheckpointRollingPolicy.build())
                .withOutputFileConfig(OutputFileConfig.builder().withPartPrefix("part").withPartSuffix(".txt").build())
                .build();
        DataStream<String> worked = env
                .fromSource(new TraceSource(trace, splits), WatermarkStrategy.noWatermarks(), "trace", Types.LONG)
                .uid("trace-source")
                .keyBy(id -> id % keyCount, Types.LONG)
                .process(new Work(workMicros))
                .uid("work")
                .name("work");
        if (bottleneckMicros > 0) {
            worked.map(new Aggregate(bottleneckMicros))
                    .uid("aggregate")
                    .name("aggregate")
                    .setParallelism(1)
                    .setMaxParallelism(1)
                    .disableChaining()
                    .sinkTo(sink)
                    .uid("committed-output")
                    .name("committed-output")
                    .setParallelism(1)
                    .setMaxParallelism(1);
        } else {
            worked.sinkTo(sink).uid("committed-output").name("committed-output");
        }
        if (plan > 0) {
            for (org.apache.flink.runtime.jobgraph.JobVertex v
                    : env.getStreamGraph().getJobGraph().getVerticesSortedTopologicallyFromSources()) {
                System.out.println(v.getName() + "\t" + v.getParallelism() + "\t" + v.getMaxParallelism());
            }
            return;
        }
        env.execute(name);
    }

    static long[] readRates(String file) throws java.io.IOException {
        List<Long> rates = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(file))) {
            String s = line.trim();
            if (!s.isEmpty()) {
                rates.add(Long.parseLong(s));
            }
        }
        long[] out = new long[rates.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = rates.get(i);
        }
        return out;
    }

    private static final int ROUNDS_PER_CHECK = 256;

    /** Spends {@code micros} of the task thread's CPU time on a record (see {@link Work}); returns the digest. */
    static long spend(java.lang.management.ThreadMXBean threads, long micros, long seed) {
        long h = seed;
        long until = threads.getCurrentThreadCpuTime() + 1000L * micros;
        do {
            for (int r = 0; r < ROUNDS_PER_CHECK; r++) {
                h += 0x9E3779B97F4A7C15L;
                h = (h ^ (h >>> 30)) * 0xBF58476D1CE4E5B9L;
                h = (h ^ (h >>> 27)) * 0x94D049BB133111EBL;
                h ^= h >>> 31;
            }
        } while (threads.getCurrentThreadCpuTime() < until);
        return h;
    }

    /**
     * The non-parallel stage of {@code --bottleneck-us}: every record waits {@code micros} of wall time (a synchronous
     * call to an external system that answers at its own pace), then passes on unchanged to the sink. Flink counts the
     * wait as busy time, as it would a blocking client call.
     */
    static final class Aggregate extends RichMapFunction<String, String> {
        private static final long serialVersionUID = 1L;
        private final long micros;

        Aggregate(long micros) {
            this.micros = micros;
        }

        @Override
        public String map(String record) {
            long until = System.nanoTime() + 1000L * micros;
            for (long left = until - System.nanoTime(); left > 0; left = until - System.nanoTime()) {
                java.util.concurrent.locks.LockSupport.parkNanos(left);
            }
            return record;
        }
    }

    /**
     * Per key, a running count and digest. Every record costs {@code micros} of the task thread's CPU time, spent
     * on rounds of a 64-bit mix (SplitMix64's finaliser) chained through the key's state, so the JIT cannot skip
     * them: real CPU work, and the same work per record on any machine. On a busy machine the same CPU time takes
     * longer on the wall clock, so the job's capacity falls with the CPU it gets, as a real job's would.
     */
    static final class Work extends KeyedProcessFunction<Long, Long, String> {
        private static final long serialVersionUID = 1L;
        private final long micros;
        private transient ValueState<Long> count;
        private transient ValueState<Long> digest;
        private transient java.lang.management.ThreadMXBean threads;

        Work(long micros) {
            this.micros = micros;
        }

        @Override
        public void open(OpenContext openContext) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            digest = getRuntimeContext().getState(new ValueStateDescriptor<>("digest", Types.LONG));
            threads = java.lang.management.ManagementFactory.getThreadMXBean();
        }

        @Override
        public void processElement(Long id, Context ctx, Collector<String> out) throws Exception {
            Long c = count.value();
            Long d = digest.value();
            long h = spend(threads, micros, (d == null ? 0L : d) ^ id);
            long n = (c == null ? 0L : c) + 1;
            count.update(n);
            digest.update(h);
            out.collect(id + "," + n);
        }
    }
}
