package io.ckguard.flinkjob;

import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;

/** Flink 1.x has no asynchronous state API: --async-state is a Flink 2.x option. */
final class AsyncState {
  private AsyncState() {}

  static SingleOutputStreamOperator<Long> apply(KeyedStream<Long, Long> keyed, int valueBytes, String failFile, String checkpointDir) {
    throw new UnsupportedOperationException("--async-state needs Flink 2.x");
  }
}
