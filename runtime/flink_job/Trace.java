package daedalus.flink;

import java.io.Serializable;

/**
 * A workload trace on the wall clock: whole records per second, one rate per second from {@code startMs}.
 *
 * <p>{@code due(now)} is the number of records that have arrived by {@code now}: the records of every whole
 * second before it plus the elapsed share of the current second. The Python side (daedalus.runtime.flink.Trace)
 * computes the same figure for the workload it exports, so the job's pending records and the exported
 * arrivals are two views of one function. Rates are whole numbers, so the total is exact in both languages.
 */
public final class Trace implements Serializable {
    private static final long serialVersionUID = 1L;

    private final long startMs;
    private final long[] rates;
    private final long[] prefix; // prefix[s] = records of seconds 0 .. s-1

    public Trace(long startMs, long[] rates) {
        this.startMs = startMs;
        this.rates = rates.clone();
        this.prefix = new long[rates.length + 1];
        for (int s = 0; s < rates.length; s++) {
            if (rates[s] < 0) {
                throw new IllegalArgumentException("negative rate at second " + s);
            }
            prefix[s + 1] = prefix[s] + rates[s];
        }
    }

    /** Records arrived by epoch millisecond {@code nowMs} (0 before the start, the total after the end). */
    public long due(long nowMs) {
        long elapsed = nowMs - startMs;
        if (elapsed <= 0) {
            return 0L;
        }
        int second = (int) Math.min(elapsed / 1000L, rates.length);
        if (second >= rates.length) {
            return prefix[rates.length];
        }
        long inSecond = elapsed - 1000L * second;
        return prefix[second] + rates[second] * inSecond / 1000L;
    }

    /** Every record of the trace. */
    public long total() {
        return prefix[rates.length];
    }

    /** When the last record is due (epoch ms). */
    public long endMs() {
        return startMs + 1000L * rates.length;
    }

    /**
     * Prints {@code due(now)} for each {@code now} given: {@code java daedalus.flink.Trace RATES_FILE START_MS NOW_MS...}
     * (the Python twin is checked against it).
     */
    public static void main(String[] args) throws java.io.IOException {
        Trace trace = new Trace(Long.parseLong(args[1]), TraceJob.readRates(args[0]));
        for (int i = 2; i < args.length; i++) {
            System.out.println(trace.due(Long.parseLong(args[i])));
        }
    }

    /** Records of split {@code k} of {@code splits} that are due when {@code due} records have arrived. */
    public static long dueOfSplit(long due, int k, int splits) {
        return due > k ? (due - 1 - k) / splits + 1 : 0L;
    }
}
