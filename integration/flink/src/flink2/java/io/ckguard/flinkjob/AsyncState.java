package io.ckguard.flinkjob;

import java.util.SplittableRandom;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * The keyed state on Flink 2.x's asynchronous state API (State V2, {@code enableAsyncState()}): with
 * the ForSt backend its database then lives on the checkpoint file system (the primary dir), not in a
 * local directory. The same random value per key as {@link StatefulFunction}, and the same
 * checkpoint-completed events and the same {@code --fail-file} (no operator state, so no
 * {@code restored} event: the REST API's latest.restored tells a restore).
 */
final class AsyncState {
  private AsyncState() {}

  static SingleOutputStreamOperator<Long> apply(
      KeyedStream<Long, Long> keyed, int valueBytes, String failFile, String checkpointDir) {
    return keyed.enableAsyncState().process(new Fn(valueBytes, failFile, checkpointDir));
  }

  static final class Fn extends KeyedProcessFunction<Long, Long, Long> implements CheckpointListener {
    private static final long serialVersionUID = 1L;
    private final int valueBytes;
    private final String failFile;
    private final String checkpointDir;
    private transient ValueState<byte[]> value;
    private transient SplittableRandom random;
    private transient long count;
    private transient long nextPoll;

    Fn(int valueBytes, String failFile, String checkpointDir) {
      this.valueBytes = valueBytes;
      this.failFile = failFile;
      this.checkpointDir = checkpointDir;
    }

    @Override
    public void processElement(Long n, Context ctx, Collector<Long> out) throws Exception {
      if (value == null) {
        value = getRuntimeContext().getState(new ValueStateDescriptor<>("value", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
        random = new SplittableRandom(n ^ System.nanoTime());
      }
      byte[] b = new byte[valueBytes];
      random.nextBytes(b);
      value.asyncUpdate(b);
      // --fail-file as in StatefulFunction: subtask 0 consumes the marker and throws once, so Flink
      // restores the job from its latest checkpoint.
      long now = System.currentTimeMillis();
      if (failFile != null && getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0 && now >= nextPoll) {
        nextPoll = now + 100;
        if (Job.consume(failFile)) {
          Events.emit("induced-failure", "subtask=0");
          throw new RuntimeException("ckguard: induced task failure (fail marker " + failFile + ")");
        }
      }
      if ((++count & 1023) == 0) {
        out.collect(count);
      }
    }

    @Override
    public void notifyCheckpointComplete(long id) {
      if (getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() != 0) {
        return;
      }
      Events.COMPLETED.incrementAndGet();
      Events.LAST_COMPLETED_ID.set(id);
      String dir = checkpointDir.endsWith("/") ? checkpointDir : checkpointDir + "/";
      Events.emit("checkpoint-completed", "id=" + id + " path=" + dir + getRuntimeContext().getJobInfo().getJobId() + "/chk-" + id);
    }
  }
}
