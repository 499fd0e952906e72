package daedalus.flink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.connector.source.SplitsAssignment;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A FLIP-27 source that emits a workload trace on the wall clock, with a real backlog.
 *
 * <p>The record ids 0, 1, 2, ... are dealt round-robin over a fixed number of splits (split k owns the ids
 * k, k + K, k + 2K, ...). A split remembers how many of its ids it has emitted; that position is its state,
 * checkpointed with the reader and handed to another reader when the job is rescaled. A reader emits what is
 * due by the trace and not yet emitted, as fast as the job takes it; when the job cannot keep up, what is due
 * accumulates and is exposed as the reader's FLIP-33 {@code pendingRecords}, like a Kafka consumer's lag.
 * Ids are emitted once per checkpointed position, so the exactly-once sink downstream holds every id once.
 */
public final class TraceSource implements Source<Long, TraceSource.Split, List<TraceSource.Split>> {
    private static final long serialVersionUID = 1L;

    private final Trace trace;
    private final int splits;

    public TraceSource(Trace trace, int splits) {
        if (splits < 1) {
            throw new IllegalArgumentException("at least one split");
        }
        this.trace = trace;
        this.splits = splits;
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.CONTINUOUS_UNBOUNDED;
    }

    @Override
    public SourceReader<Long, Split> createReader(SourceReaderContext context) {
        return new Reader(trace, context);
    }

    @Override
    public SplitEnumerator<Split, List<Split>> createEnumerator(SplitEnumeratorContext<Split> context) {
        List<Split> all = new ArrayList<>();
        for (int k = 0; k < splits; k++) {
            all.add(new Split(k, splits, 0L));
        }
        return new Enumerator(context, all);
    }

    @Override
    public SplitEnumerator<Split, List<Split>> restoreEnumerator(SplitEnumeratorContext<Split> context,
                                                                 List<Split> checkpoint) {
        return new Enumerator(context, new ArrayList<>(checkpoint));
    }

    @Override
    public SimpleVersionedSerializer<Split> getSplitSerializer() {
        return new SplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<List<Split>> getEnumeratorCheckpointSerializer() {
        return new SplitListSerializer();
    }

    /** Split k of K and how many of its ids were emitted. */
    public static final class Split implements org.apache.flink.api.connector.source.SourceSplit {
        final int index;
        final int of;
        volatile long emitted; // written by the task thread, read by the metrics thread

        Split(int index, int of, long emitted) {
            this.index = index;
            this.of = of;
            this.emitted = emitted;
        }

        @Override
        public String splitId() {
            return "trace-" + index + "-of-" + of;
        }

        Split copy() {
            return new Split(index, of, emitted);
        }

        @Override
        public String toString() {
            return splitId() + "@" + emitted;
        }
    }

    /** Emits what the trace makes due on its splits; pending = due − emitted. */
    static final class Reader implements SourceReader<Long, Split> {
        private static final int BATCH = 200; // records per poll: the mailbox stays responsive to checkpoints
        private static final long IDLE_WAIT_MS = 5;

        private final Trace trace;
        private final SourceReaderContext context;
        private final List<Split> owned = new CopyOnWriteArrayList<>();
        private final ScheduledExecutorService timer;
        private CompletableFuture<Void> available = CompletableFuture.completedFuture(null);
        private int cursor;

        Reader(Trace trace, SourceReaderContext context) {
            this.trace = trace;
            this.context = context;
            this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "trace-source-timer-" + context.getIndexOfSubtask());
                t.setDaemon(true);
                return t;
            });
        }

        @Override
        public void start() {
            context.metricGroup().setPendingRecordsGauge(this::pending);
        }

        /** Records due on this reader's splits and not yet emitted (the backlog). */
        long pending() {
            long due = trace.due(System.currentTimeMillis());
            long sum = 0;
            for (Split s : owned) {
                sum += Math.max(0L, Trace.dueOfSplit(due, s.index, s.of) - s.emitted);
            }
            return sum;
        }

        @Override
        public InputStatus pollNext(ReaderOutput<Long> output) {
            int n = owned.size();
            if (n == 0) {
                return waitABit();
            }
            long due = trace.due(System.currentTimeMillis());
            int budget = BATCH;
            for (int i = 0; i < n && budget > 0; i++) {
                Split s = owned.get((cursor + i) % n);
                long until = Math.min(Trace.dueOfSplit(due, s.index, s.of), s.emitted + budget);
                for (long j = s.emitted; j < until; j++) {
                    output.collect(s.index + j * s.of);
                }
                budget -= (int) (until - Math.min(until, s.emitted));
                if (until > s.emitted) {
                    s.emitted = until;
                }
            }
            cursor = (cursor + 1) % n;
            return budget < BATCH ? InputStatus.MORE_AVAILABLE : waitABit();
        }

        private InputStatus waitABit() {
            CompletableFuture<Void> next = new CompletableFuture<>();
            available = next;
            timer.schedule(() -> next.complete(null), IDLE_WAIT_MS, TimeUnit.MILLISECONDS);
            return InputStatus.NOTHING_AVAILABLE;
        }

        @Override
        public List<Split> snapshotState(long checkpointId) {
            List<Split> copies = new ArrayList<>();
            for (Split s : owned) {
                copies.add(s.copy());
            }
            return copies;
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return available;
        }

        @Override
        public void addSplits(List<Split> splits) {
            owned.addAll(splits);
        }

        @Override
        public void notifyNoMoreSplits() {
        }

        @Override
        public void close() {
            timer.shutdownNow();
        }
    }

    /**
     * Deals the splits out once every reader of the current parallelism has registered, so each reader gets
     * an even share; splits handed back by a failed reader are dealt out again the same way.
     */
    static final class Enumerator implements SplitEnumerator<Split, List<Split>> {
        private final SplitEnumeratorContext<Split> context;
        private final List<Split> unassigned;

        Enumerator(SplitEnumeratorContext<Split> context, List<Split> unassigned) {
            this.context = context;
            this.unassigned = unassigned;
        }

        @Override
        public void start() {
        }

        @Override
        public void handleSplitRequest(int subtaskId, String requesterHostname) {
        }

        @Override
        public void addSplitsBack(List<Split> splits, int subtaskId) {
            unassigned.addAll(splits);
            assignWhenAllRegistered();
        }

        @Override
        public void addReader(int subtaskId) {
            assignWhenAllRegistered();
        }

        private void assignWhenAllRegistered() {
            Map<Integer, ?> readers = context.registeredReaders();
            if (unassigned.isEmpty() || readers.size() < context.currentParallelism()) {
                return;
            }
            List<Integer> ids = new ArrayList<>(new TreeSet<>(readers.keySet()));
            Map<Integer, List<Split>> deal = new HashMap<>();
            unassigned.sort((a, b) -> Integer.compare(a.index, b.index));
            for (int i = 0; i < unassigned.size(); i++) {
                deal.computeIfAbsent(ids.get(i % ids.size()), x -> new ArrayList<>()).add(unassigned.get(i));
            }
            unassigned.clear();
            context.assignSplits(new SplitsAssignment<>(deal));
        }

        @Override
        public List<Split> snapshotState(long checkpointId) {
            List<Split> copies = new ArrayList<>();
            for (Split s : unassigned) {
                copies.add(s.copy());
            }
            return copies;
        }

        @Override
        public void close() {
        }
    }

    static final class SplitSerializer implements SimpleVersionedSerializer<Split> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Split split) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(16);
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                write(out, split);
            }
            return bytes.toByteArray();
        }

        @Override
        public Split deserialize(int version, byte[] serialized) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                return read(in);
            }
        }

        static void write(DataOutputStream out, Split split) throws IOException {
            out.writeInt(split.index);
            out.writeInt(split.of);
            out.writeLong(split.emitted);
        }

        static Split read(DataInputStream in) throws IOException {
            return new Split(in.readInt(), in.readInt(), in.readLong());
        }
    }

    static final class SplitListSerializer implements SimpleVersionedSerializer<List<Split>> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(List<Split> splits) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeInt(splits.size());
                for (Split s : splits) {
                    SplitSerializer.write(out, s);
                }
            }
            return bytes.toByteArray();
        }

        @Override
        public List<Split> deserialize(int version, byte[] serialized) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                int n = in.readInt();
                List<Split> splits = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    splits.add(SplitSerializer.read(in));
                }
                return splits;
            }
        }
    }
}
